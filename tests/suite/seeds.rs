//! `cachesim run --seeds N` end to end: its medians, minima, maxima and per-seed values are those
//! of N single runs under `--seed S`, …, `--seed S+N−1` (checked by hand below), its output is the
//! same bytes at any thread count, `--seeds 1` is the plain run, output files are written once per
//! seed, and the runs the seed cannot change, `--seeds 0`, too many seeds and seeds past the
//! largest are refused.

use crate::common;

use common::{fails, ok};

/// The bundled sample, 40 requests sent at 8 req/s: the seed draws the send times.
const LOAD: [&str; 4] = ["--num-prompts", "40", "--request-rate", "8"];

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&ok(args)).unwrap()
}

/// The middle of three.
fn median3(mut v: [f64; 3]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[1]
}

#[test]
fn medians_are_the_median_of_the_single_seed_runs() {
    let seeds = json(&[&LOAD[..], &["--seed", "4", "--seeds", "3", "--json"]].concat());
    let single: Vec<serde_json::Value> =
        ["4", "5", "6"].iter().map(|s| json(&[&LOAD[..], &["--seed", s, "--json"]].concat())).collect();
    assert_eq!(seeds["seeds"]["seeds"], serde_json::json!([4, 5, 6]));
    assert_eq!(seeds["seeds"]["varied"][0], "the send times (8 req/s, sglang process)");
    assert_eq!(seeds["seeds"]["interval"]["coverage"], 0.75);
    let mut differ = 0;
    for key in ["output_throughput", "mean_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "mean_e2e_latency_ms", "duration"]
    {
        let v: Vec<f64> = single.iter().map(|r| r[key].as_f64().unwrap()).collect();
        let m = &seeds["metrics"][key];
        assert_eq!(m["median"].as_f64().unwrap(), median3([v[0], v[1], v[2]]), "{key}");
        assert_eq!(m["min"].as_f64().unwrap(), v.iter().copied().fold(f64::INFINITY, f64::min), "{key}");
        assert_eq!(m["max"].as_f64().unwrap(), v.iter().copied().fold(f64::NEG_INFINITY, f64::max), "{key}");
        assert_eq!(m["interval"], serde_json::json!([m["min"], m["max"]]), "{key}: at 3 seeds, the extremes");
        let per: Vec<f64> = m["per_seed"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(per, v, "{key}: in seed order");
        differ += usize::from(v[0] != v[1] || v[1] != v[2]);
    }
    assert!(differ > 0, "the send times should change some metric");
    // Nested numbers (`cache`) too, and per-seed details in seed order.
    let hit: Vec<f64> = single.iter().map(|r| r["cache"]["peak_used_tokens"].as_f64().unwrap()).collect();
    assert_eq!(
        seeds["metrics"]["cache"]["peak_used_tokens"]["median"].as_f64().unwrap(),
        median3([hit[0], hit[1], hit[2]])
    );
    assert_eq!(seeds["per_seed"][2]["seed"], 6);
    assert_eq!(seeds["config"]["arrivals"]["seed"], 4);

    // The text report: each row's value is the median, then [lo, hi].
    let text = ok(&[&LOAD[..], &["--seed", "4", "--seeds", "3"]].concat());
    let v: Vec<f64> = single.iter().map(|r| r["mean_ttft_ms"].as_f64().unwrap()).collect();
    let (lo, hi) =
        (v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(f64::NEG_INFINITY, f64::max));
    let row =
        format!("{:<40} {:<10} [{lo:.2}, {hi:.2}]", "Mean TTFT (ms):", format!("{:.2}", median3([v[0], v[1], v[2]])));
    assert!(text.lines().any(|l| l == row), "no row {row:?} in:\n{text}");
    assert!(text.contains("Seeds:          3 runs, --seed 4 to 6; the seed drew the send times"), "{text}");
    assert!(text.contains("seeds 4–6 (3 runs)"), "{text}");
    // Successful requests did not vary: a value alone.
    assert!(text.lines().any(|l| l.trim_end() == "Successful requests:                     40"), "{text}");
}

#[test]
fn output_is_identical_whatever_the_thread_count() {
    let run = |threads: &str, json: bool| {
        let mut args = vec!["--seeds", "4", "--instances", "2", "--router", "random", "--request-rate", "4"];
        if json {
            args.push("--json");
        }
        common::ok_at_threads(&args, threads)
    };
    for json in [false, true] {
        let one = run("1", json);
        assert_eq!(one, run("2", json), "json {json}");
        assert_eq!(one, run("3", json), "json {json}");
    }
}

#[test]
fn one_seed_is_the_plain_run() {
    for extra in [&[][..], &["--json"][..]] {
        let plain = ok(&[&LOAD[..], extra].concat());
        assert_eq!(plain, ok(&[&LOAD[..], &["--seeds", "1"], extra].concat()));
    }
}

#[test]
fn output_files_are_written_once_per_seed() {
    let dir = tempfile::tempdir().unwrap();
    let d = |name: &str| dir.path().join(name);
    let r = d("r.csv");
    ok(&[&LOAD[..], &["--seed", "2", "--seeds", "2", "--requests-csv", r.to_str().unwrap()]].concat());
    assert!(!r.exists(), "no unnamed file: each seed has its own");
    for seed in ["2", "3"] {
        let single = d(&format!("single{seed}.csv"));
        ok(&[&LOAD[..], &["--seed", seed, "--requests-csv", single.to_str().unwrap()]].concat());
        let per_seed = std::fs::read(d(&format!("r.seed{seed}.csv"))).unwrap();
        assert_eq!(per_seed, std::fs::read(&single).unwrap(), "seed {seed}");
    }
    // A seed's file that would overwrite an input is refused before anything runs.
    let trace = d("t.seed0.jsonl");
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/traces/sessions.jsonl"), &trace).unwrap();
    let out = d("t.jsonl");
    let e = fails(
        &[&LOAD[..], &["--trace", trace.to_str().unwrap(), "--seeds", "2", "--requests-csv", out.to_str().unwrap()]]
            .concat(),
    );
    assert!(e.contains("--requests-csv") && e.contains("destroy the input"), "{e}");
}

#[test]
fn refusals() {
    let e = fails(&["--seeds", "0"]);
    assert!(e.contains("--seeds") && e.contains("1..=1000"), "{e}");
    assert!(fails(&["--seeds", "1001"]).contains("1..=1000"));
    // The bundled sample at its own times: nothing drawn, nothing to vary.
    let e = fails(&["--seeds", "3"]);
    assert!(e.contains("3 seeds would run the same simulation 3 times") && e.contains("own time stamps"), "{e}");
    let e = fails(&["--seeds", "3", "--request-rate", "inf"]);
    assert!(e.contains("sent at once (--request-rate inf)"), "{e}");
    // A timed trace replayed at its own times, even cut by --num-prompts (its first N).
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("timed.jsonl");
    let rows: String = (0..6)
        .map(|i| {
            format!("{{\"timestamp\": {}, \"input_length\": 64, \"output_length\": 4, \"hash_ids\": [{i}]}}\n", i * 100)
        })
        .collect();
    std::fs::write(&t, rows).unwrap();
    let e = fails(&["--trace", t.to_str().unwrap(), "--num-prompts", "3", "--seeds", "2", "--trace-block-size", "64"]);
    assert!(e.contains("the trace's own time stamps set the send times"), "{e}");
    // The same trace at a rate varies.
    ok(&["--trace", t.to_str().unwrap(), "--request-rate", "5", "--seeds", "2", "--trace-block-size", "64"]);
    let e = fails(&[&LOAD[..], &["--seed", "18446744073709551615", "--seeds", "2"]].concat());
    assert!(e.contains("past the largest seed"), "{e}");
    // The send times are NumPy's, seeded below 2^32.
    let e = fails(&[&LOAD[..], &["--seed", "4294967295", "--seeds", "2"]].concat());
    assert!(e.contains("seed 4294967296") && e.contains("NumPy"), "{e}");
    // Only `run` takes it.
    assert!(fails(&["sweep", "--seeds", "2", "--max-num-seqs", "8,16"]).contains("--seeds"));
}
