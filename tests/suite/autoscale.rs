//! Autoscaling through the binary: the bundled sample at fifty times its load on a fleet that
//! starts with one instance — the autoscaling table and `autoscaling` in `--json`, every request
//! sent completing or failing (three lost at a short drain timeout), the sync CSV and the figure,
//! the same bytes at one and two threads, the smallest fixed fleet attaining as much
//! (`--compare-fixed`), `--goodput` as `vllm bench serve` prints it, and the refusals.

use crate::common::{fails, ok, ok_at_threads};

/// Fifty times the sample's load, one instance at first, up to four; syncs every 0.2 s, cold
/// starts of 0.5 s, scale-downs held 1 s, drains cut at 0.05 s; steps priced by the raw roofline
/// (`--calibration none`), so that the scaler's story does not move when a profile is refitted.
const BASE: [&str; 26] = [
    "--time-scale",
    "0.02",
    "--instances",
    "1",
    "--router",
    "kv-aware",
    "--autoscale",
    "hpa",
    "--max-instances",
    "4",
    "--scale-metric",
    "in-flight",
    "--scale-target",
    "8",
    "--hpa-sync-period-s",
    "0.2",
    "--cold-start-s",
    "0.5",
    "--scale-down-window-s",
    "1",
    "--drain-timeout-s",
    "0.05",
    "--calibration",
    "none",
    "--goodput",
    "ttft:100",
];

fn json(extra: &[&str]) -> serde_json::Value {
    let args: Vec<&str> = BASE.iter().copied().chain(extra.iter().copied()).chain(["--json"]).collect();
    serde_json::from_str(&ok(&args)).expect("JSON")
}

#[test]
fn the_fleet_grows_and_shrinks_and_every_request_is_accounted_for() {
    let d = json(&[]);
    let a = &d["autoscaling"];
    assert_eq!(
        (a["started"].as_u64(), a["drained"].as_u64(), a["peak_instances"].as_u64()),
        (Some(3), Some(2), Some(4)),
        "{a}"
    );
    // Both drains were cut at their timeout: the three requests they held failed.
    assert_eq!((a["stopped_at_timeout"].as_u64(), a["lost"].as_u64()), (Some(2), Some(3)));
    assert_eq!(d["failed_reasons"]["scaled_down"].as_u64(), Some(3));
    let sent = d["requests_sent"].as_u64().unwrap();
    assert_eq!(d["completed"].as_u64().unwrap() + 3, sent);
    // Every sync within the bounds; the first scale-up waits for the load.
    let syncs = a["syncs"].as_array().unwrap();
    for s in syncs {
        let (serving, starting, desired) =
            (s["serving"].as_u64().unwrap(), s["starting"].as_u64().unwrap(), s["desired"].as_u64().unwrap());
        assert!(serving >= 1 && serving + starting <= 4 && (1..=4).contains(&desired), "{s}");
    }
    assert_eq!(syncs[0]["time_s"].as_f64(), Some(0.2));
    // Instance-hours: the mean fleet over the run.
    let (hours, mean, end) =
        (a["instance_hours"].as_f64().unwrap(), a["mean_instances"].as_f64().unwrap(), a["end_s"].as_f64().unwrap());
    assert!((hours * 3600.0 - mean * end).abs() < 1e-9, "{a}");
    assert!(a["gpu_hours"].as_f64() == Some(hours), "one GPU per instance");
    assert_eq!(d["config"]["autoscale"]["cold_start"]["seconds"].as_f64(), Some(0.5));
    // The goodput line and attainment agree: good requests over the duration, over those sent.
    let goodput = d["request_goodput"].as_f64().unwrap();
    let good = goodput * d["duration"].as_f64().unwrap();
    assert!((good / sent as f64 * 100.0 - a["attainment_pct"].as_f64().unwrap()).abs() < 1e-6, "{a}");
    // A fixed fleet says nothing of autoscaling.
    let fixed: serde_json::Value = serde_json::from_str(&ok(&["--time-scale", "0.02", "--json"])).unwrap();
    assert!(fixed.get("autoscaling").is_none() && fixed["config"].get("autoscale").is_none());
    assert!(fixed.get("request_goodput").is_none());
}

#[test]
fn the_text_report_the_sync_csv_and_the_figure() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("fleet.csv");
    let svg = dir.path().join("fleet.svg");
    let args: Vec<&str> = BASE
        .iter()
        .copied()
        .chain(["--fleet-csv", csv.to_str().unwrap(), "--fleet-plot", svg.to_str().unwrap()])
        .collect();
    let out = ok(&args);
    let table = out.split("= Autoscaling =").nth(1).expect("the autoscaling table");
    assert!(table.contains("3 instances started (0 cancelled before serving), 2 drained (2 stopped at the 0.05 s drain timeout, 3 requests lost); cold start 0.5 s"), "{table}");
    assert!(table.contains("Goodput ttft:100: "), "{table}");
    assert!(out.contains("Request goodput (req/s):"), "{out}");
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert!(rows.starts_with("time_s,serving,starting,draining,average,proposed,desired\n0.2,1,0,0,"), "{rows}");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
}

#[test]
fn the_same_bytes_at_any_thread_count_and_the_best_fixed_fleet() {
    let args: Vec<&str> = BASE.iter().copied().chain(["--compare-fixed"]).collect();
    let a = ok_at_threads(&args, "1");
    assert_eq!(a, ok_at_threads(&args, "2"));
    let d = json(&["--compare-fixed"]);
    let f = &d["autoscaling"]["best_fixed"];
    let found = &f["found"];
    assert!(found["attainment_pct"].as_f64().unwrap() >= f["goal_pct"].as_f64().unwrap(), "{f}");
    assert!((1..=4).contains(&found["instances"].as_u64().unwrap()), "{f}");
    // Bisection over 1..4: the largest first, then at most two more.
    assert!((2..=3).contains(&f["simulations"].as_u64().unwrap()), "{f}");
}

#[test]
fn autoscaling_flags_are_refused_where_they_mean_nothing_or_cannot_be() {
    let hpa = ["--autoscale", "hpa", "--max-instances", "4", "--scale-metric", "waiting", "--scale-target", "2"];
    let with =
        |extra: &[&'static str]| -> Vec<&'static str> { hpa.iter().copied().chain(extra.iter().copied()).collect() };
    for (args, says) in [
        (vec!["--max-instances", "4"], "--max-instances: means nothing without autoscaling"),
        (vec!["--cold-start-s", "30"], "--cold-start-s: means nothing without autoscaling"),
        (
            vec!["--autoscale", "hpa", "--scale-metric", "waiting", "--scale-target", "2"],
            "--max-instances: is required",
        ),
        (with(&["--scale-metric", "kv-usage", "--scale-target", "80"]), "a fraction, not a percentage"),
        (with(&["--min-instances", "0"]), "scaling to zero"),
        (with(&["--instances", "5"]), "--instances: 5 (the instances serving at the start) must be between"),
        (with(&["--fail-at", "10:0"]), "failures and rolling restarts in an autoscaled fleet are not modelled yet"),
        (
            with(&["--prefill-instances", "1", "--decode-instances", "1"]),
            "prefill/decode pools are autoscaled by the SLA planner",
        ),
        (
            vec!["--autoscale", "sla", "--prefill-instances", "1", "--decode-instances", "1", "--drain-timeout-s", "5"],
            "--drain-timeout-s: is not modelled for prefill/decode pools",
        ),
        (
            vec!["--autoscale", "sla", "--prefill-instances", "9", "--decode-instances", "1"],
            "--prefill-instances: 9 (the pool's instances at the start) must be between",
        ),
        (with(&["--engine", "vllm-v0"]), "not modelled for vLLM V0"),
        (
            with(&["--cold-start-s", "5", "--weights-load-gbps", "1"]),
            "--weights-load-gbps: means nothing with --cold-start-s",
        ),
        (vec!["--fleet-csv", "f.csv"], "--fleet-csv: means nothing without --autoscale"),
        (with(&["--compare-fixed"]), "--compare-fixed: needs --autoscale and --goodput"),
        (vec!["--goodput", "ttft"], "is not KEY:MS"),
        (vec!["--goodput", "ttft:1", "ttft:2"], "--goodput: `ttft` is given twice"),
    ] {
        let err = fails(&args);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// Dynamo's SLA planner over prefill/decode pools through the binary: every adjustment records
/// both pools' counts within the budget, nothing is lost to a drain, the same bytes at any
/// thread count, and the best fixed pools name their split.
#[test]
fn the_sla_planner_sizes_prefill_and_decode_pools() {
    let args = [
        "--time-scale",
        "0.02",
        "--prefill-instances",
        "1",
        "--decode-instances",
        "1",
        "--autoscale",
        "sla",
        "--max-gpu-budget",
        "4",
        "--throughput-adjustment-interval",
        "0.5",
        "--ttft",
        "100",
        "--itl",
        "20",
        "--cold-start-s",
        "0.5",
        "--goodput",
        "ttft:100",
        "--compare-fixed",
    ];
    let a = ok_at_threads(&args, "1");
    assert_eq!(a, ok_at_threads(&args, "2"));
    let a = String::from_utf8(a).expect("utf-8");
    assert!(
        a.contains("SLA planner: ") && a.contains("no drain timeout in prefill/decode pools, 0 requests lost"),
        "{a}"
    );
    let with_json: Vec<&str> = args.iter().copied().chain(["--json"]).collect();
    let d: serde_json::Value = serde_json::from_str(&ok(&with_json)).expect("JSON");
    let s = &d["autoscaling"];
    let syncs = s["syncs"].as_array().expect("syncs");
    assert!(!syncs.is_empty(), "{s}");
    for x in syncs {
        let (p, dd) = (x["desired_prefill"].as_u64().unwrap(), x["desired_decode"].as_u64().unwrap());
        assert!(p >= 1 && dd >= 1 && p + dd <= 4, "{x}");
        assert!(x["decode_engine_rps"].as_f64().is_some_and(|r| r > 0.0) || x["outcome"] != "scale", "{x}");
    }
    let found = &s["best_fixed"]["found"];
    if !found.is_null() {
        let (p, dd, n) = (
            found["prefill"].as_u64().unwrap(),
            found["decode"].as_u64().unwrap(),
            found["instances"].as_u64().unwrap(),
        );
        assert!(p >= 1 && dd >= 1 && p + dd == n && n <= 4, "{found}");
    }
}
