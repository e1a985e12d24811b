//! `cachesim plan` beyond the rate search: the cheapest deployment at a target rate (each
//! deployment's SLO values equal a plain `cachesim run` at that rate, costs are instances × GPUs
//! × the user's price, the cheapest is named), the fewest instances by bisection, list flags as
//! grid axes, refusals (missing prices, a price without a target), the SLO-against-rate figure, the
//! calibration line, and output that does not depend on the thread count.

use crate::common;

use common::{fails, ok};
use serde_json::Value;

const DEPLOY: [&str; 14] = [
    "plan",
    "--num-prompts",
    "60",
    "--slo",
    "ttft_p99=60,tpot_p99=15",
    "--target-rate",
    "10",
    "--gpus",
    "h100-sxm,a100-80gb,l40s",
    "--tp",
    "1,2",
    "--gpu-price",
    "h100-sxm=3.5,a100-80gb=1.8",
    "--gpu-price=l40s=0.9",
];

#[test]
fn the_cheapest_deployment_at_a_target_rate() {
    let mut args = DEPLOY.to_vec();
    args.push("--json");
    let doc: Value = serde_json::from_str(&ok(&args)).unwrap();
    let results = doc["results"].as_array().unwrap();
    assert_eq!(results.len(), 6, "3 GPUs × 2 TP");
    let price = |g: &str| doc["gpu_prices_usd_per_hour"][g].as_f64().unwrap();
    let mut last = 0.0;
    let mut met = 0;
    for r in results {
        let (gpu, tp) = (r["gpu"].as_str().unwrap(), r["tp"].as_u64().unwrap());
        assert_eq!(r["knobs"]["gpu"], gpu);
        assert_eq!(r["knobs"]["tp"], tp.to_string());
        // Each deployment's run at the target rate is `cachesim run` at that rate, exactly.
        let run: Value = serde_json::from_str(&ok(&[
            "run",
            "--num-prompts",
            "60",
            "--request-rate",
            "10",
            "--gpu",
            gpu,
            "--tp",
            &tp.to_string(),
            "--json",
        ]))
        .unwrap();
        let t = if r["at_target"].is_null() { continue } else { &r["at_target"] };
        met += 1;
        assert_eq!(t["slo_values"]["p99_ttft_ms"], run["p99_ttft_ms"]);
        assert_eq!(t["slo_values"]["p99_tpot_ms"], run["p99_tpot_ms"]);
        assert!(run["p99_ttft_ms"].as_f64().unwrap() <= 60.0 && run["p99_tpot_ms"].as_f64().unwrap() <= 15.0);
        let c = &r["cost"];
        assert_eq!(c["gpus"].as_u64().unwrap(), tp);
        assert_eq!(c["usd_per_hour"].as_f64().unwrap(), tp as f64 * price(gpu));
        let per_m = tp as f64 * price(gpu) / (run["output_throughput"].as_f64().unwrap() * 3600.0) * 1e6;
        assert!((c["usd_per_million_output_tokens"].as_f64().unwrap() - per_m).abs() < 1e-9);
        assert!(c["usd_per_hour"].as_f64().unwrap() >= last, "cheapest first");
        last = c["usd_per_hour"].as_f64().unwrap();
    }
    assert!((2..6).contains(&met), "the SLO is meant to split the deployments: {met} meet it");
    // A deployment missing the SLO is listed after those meeting it, without a cost.
    assert!(results.last().unwrap()["cost"].is_null());
    // The text answer: the table and one sentence naming the first of the JSON's results.
    let text = ok(&DEPLOY);
    let first = &results[0];
    let want = format!(
        "Cheapest: 1 × {} TP{} ({} GPU{}) serves 10 req/s within the SLO",
        first["gpu"].as_str().unwrap(),
        first["tp"],
        first["tp"],
        if first["tp"] == 1 { "" } else { "s" }
    );
    assert!(text.contains(&want), "{text}");
    assert!(text.contains(&format!("for ${:.2} per hour", first["cost"]["usd_per_hour"].as_f64().unwrap())), "{text}");
    assert!(text.contains("misses the SLO even with 1 instance"), "{text}");
    // No profile is fitted for llama-3.1-8b under vLLM on these GPUs: the prior, said so.
    assert!(text.contains("Calibration:    the composed prior (the H200 kernel steps' device factors"), "{text}");
    assert!(text.contains("no fitted profile matches their GPU, engine family and model"), "{text}");
}

/// Without prices, the deployment with the fewest GPUs is the answer, and no cost is shown.
#[test]
fn fewest_gpus_without_prices() {
    let args = ["plan", "--num-prompts", "20", "--slo", "ttft_p99=500", "--target-rate", "10", "--tp", "1,2"];
    let text = ok(&args);
    assert!(text.contains("\nFewest GPUs: 1 × h100-sxm TP1 (1 GPU) serves 10 req/s within the SLO"), "{text}");
    assert!(text.contains("--gpu-price GPU=USD_PER_HOUR,… ranks by cost instead"), "{text}");
    assert!(!text.contains("$/hour"), "{text}");
}

/// The calibration line lists only the fitted profiles that match a configuration of the grid,
/// and the engine pieces the composed prior takes for the others.
#[test]
fn only_the_profiles_that_apply_are_listed() {
    let args = [
        "plan",
        "--num-prompts",
        "6",
        "--slo",
        "ttft_p99=2000",
        "--max-rate",
        "2",
        "--engine",
        "sglang",
        "--gpus",
        "a100-80gb,l40s",
    ];
    let text = ok(&args);
    let line = text.lines().find(|l| l.starts_with("Calibration:")).unwrap_or_default();
    assert!(line.contains("profiles that apply: a100-80gb-sglang ("), "{line}");
    // The L40S points take the composed prior, with SGLang's engine piece (fitted on H100s).
    assert!(
        line.contains("else the composed prior (the H200 kernel steps' device factors; sglang's host time from h100-sxm-sglang-qwen3)"),
        "{line}"
    );
    assert!(!line.contains("h100-sxm-sglang (") && !line.contains("vllm"), "{line}");
}

/// A search the SLO never stops names its real cause: the client's concurrency cap, the
/// --num-prompts sample or the trace's length; one no rate meets names the target missed.
#[test]
fn plan_answers_name_their_cause() {
    let base = ["plan", "--slo", "ttft_p99=2000", "--max-rate", "50"];
    let with = |more: &[&str]| [&base[..], more].concat().join("\u{1}");
    let run = |joined: String| ok(&joined.split('\u{1}').collect::<Vec<&str>>());
    let text = run(with(&["--num-prompts", "20", "--max-concurrency", "2"]));
    assert!(text.contains("--max-concurrency 2 keeps at most 2 requests in flight whatever the rate"), "{text}");
    assert!(!text.contains("--num-prompts)"), "{text}");
    let text = run(with(&["--num-prompts", "3"]));
    assert!(
        text.contains("--num-prompts 3 sends too few requests to load it; send more (the trace holds 160)"),
        "{text}"
    );
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("plan-tiny");
    std::fs::create_dir_all(&dir).unwrap();
    let tiny = dir.join("tiny.jsonl");
    let gsp = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/traces/gsp.jsonl")).unwrap();
    std::fs::write(&tiny, gsp.lines().take(3).map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    let text = run(with(&["--trace", tiny.to_str().unwrap()]));
    assert!(text.contains("the trace's 3 requests are too few to load it; a longer trace would"), "{text}");
    let text = ok(&["plan", "--slo", "ttft_p99=1", "--num-prompts", "4"]);
    assert!(text.contains("No configuration meets the SLO at any rate tried: even at"), "{text}");
    assert!(text.contains("the lowest rate tried, where requests barely overlap, p99_ttft_ms"), "{text}");
    assert!(text.contains("> 1 ms"), "{text}");
}

#[test]
fn deployment_refusals() {
    let err = fails(&DEPLOY[..13]);
    assert!(err.contains("no price for `l40s`; add l40s=USD_PER_HOUR (no prices are built in)"), "{err}");
    let price_no_target = ["plan", "--num-prompts", "4", "--slo", "ttft_p99=60", "--gpu-price", "h100-sxm=1"];
    assert!(fails(&price_no_target).contains("--gpu-price prices deployments at a --target-rate"));
    assert!(fails(&["plan", "--slo", "ttft_p99=60", "--target-rate", "10", "--gpu-price", "h100-sxm"])
        .contains("GPU=USD_PER_HOUR"));
    let dram_no_target = ["plan", "--num-prompts", "4", "--slo", "ttft_p99=60", "--dram-price", "0.01"];
    assert!(fails(&dram_no_target).contains("--dram-price prices deployments at a --target-rate"));
    let free_memory = [
        "plan",
        "--num-prompts",
        "4",
        "--slo",
        "ttft_p99=60",
        "--target-rate",
        "10",
        "--gpu-price",
        "h100-sxm=1",
        "--kv-offloading-size",
        "16",
    ];
    assert!(fails(&free_memory).contains("--kv-offloading-size in a priced plan needs --dram-price"));
    assert!(fails(&["plan", "--slo", "ttft_p99=60", "--target-rate", "10", "--dram-price", "-1"]).contains("GiB-hour"));
}

/// Host KV tiers as a grid axis (`unset` leaves the flag out) priced by --dram-price: each
/// deployment's host memory is its instances × the tier, its cost GPUs × price + that × the
/// DRAM price, and a tier's point runs exactly as `cachesim run` with it.
#[test]
fn host_tiers_are_priced_axes() {
    let args = [
        "plan",
        "--num-prompts",
        "80",
        "--num-gpu-blocks-override",
        "300",
        "--slo",
        "ttft_p99=400",
        "--target-rate",
        "4",
        "--instances",
        "1..3",
        "--grid",
        "kv-offloading-size=unset,8,64",
        "--gpu-price",
        "h100-sxm=3.5",
        "--dram-price",
        "0.005",
        "--json",
    ];
    let doc: Value = serde_json::from_str(&ok(&args)).unwrap();
    assert_eq!(doc["dram_price_usd_per_gib_hour"], 0.005);
    let results = doc["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    for r in results {
        let size = r["knobs"]["kv-offloading-size"].as_str().unwrap();
        let (c, n) = (&r["cost"], r["instances"].as_u64().expect("the SLO is met"));
        let gib = if size == "unset" { 0.0 } else { size.parse::<f64>().unwrap() * n as f64 };
        assert_eq!(c["host_gib"].as_f64().unwrap_or(0.0), gib, "{size}");
        assert_eq!(c["usd_per_hour"].as_f64().unwrap(), n as f64 * 3.5 + gib * 0.005, "{size}");
        let mut run = vec!["run", "--num-prompts", "80", "--num-gpu-blocks-override", "300", "--request-rate", "4"];
        let n_text = n.to_string();
        if n > 1 {
            run.extend(["--instances", &n_text]);
        }
        if size != "unset" {
            run.extend(["--kv-offloading-size", size]);
        }
        run.push("--json");
        let run: Value = serde_json::from_str(&ok(&run)).unwrap();
        assert_eq!(r["at_target"]["slo_values"]["p99_ttft_ms"], run["p99_ttft_ms"], "{size}");
        assert_eq!(run["host_tier"].is_null(), size == "unset");
    }
    // `unset` is for flags without a default.
    let err = fails(&["sweep", "--num-prompts", "4", "--grid", "block-size=unset,16"]);
    assert!(err.contains("has a default; name it instead"), "{err}");
}

/// Disk KV tiers priced by --ssd-price beside the host memory --dram-price prices: LMCache's
/// local disk is its size on every rank (TP 2: twice the flag), HiCache's file store its
/// `max_size` on every rank, and a Mooncake store's segment is host memory; each deployment's
/// cost is GPUs × price + host GiB × the DRAM price + disk GiB × the SSD price. A disk tier
/// without --ssd-price, an unbounded file store or LMCache server and --ssd-price without a
/// target are refused.
#[test]
fn disk_tiers_are_priced_axes() {
    let base = [
        "plan",
        "--num-prompts",
        "40",
        "--slo",
        "ttft_p99=400",
        "--target-rate",
        "4",
        "--instances",
        "1..2",
        "--gpu-price",
        "h100-sxm=3.5",
        "--dram-price",
        "0.005",
    ];
    let priced = |extra: &[&str]| -> Vec<Value> {
        let args: Vec<&str> = base.iter().chain(extra).chain(&["--ssd-price", "0.0001", "--json"]).copied().collect();
        let doc: Value = serde_json::from_str(&ok(&args)).unwrap();
        assert_eq!(doc["ssd_price_usd_per_gib_hour"], 0.0001);
        doc["results"].as_array().unwrap().clone()
    };
    let check = |r: &Value, host_per_instance: f64, disk_per_instance: f64| {
        let (c, n) = (&r["cost"], r["instances"].as_u64().expect("the SLO is met") as f64);
        let (host, disk) = (c["host_gib"].as_f64().unwrap_or(0.0), c["disk_gib"].as_f64().unwrap_or(0.0));
        assert!((host - n * host_per_instance).abs() < 1e-9, "{c}");
        assert_eq!(disk, n * disk_per_instance, "{c}");
        let gpus = c["gpus"].as_f64().unwrap();
        let usd = gpus * 3.5 + host * 0.005 + disk * 0.0001;
        assert!((c["usd_per_hour"].as_f64().unwrap() - usd).abs() < 1e-9, "{c}");
    };
    let lmcache = [
        "--tp",
        "2",
        "--engine-version",
        "vllm@0.18",
        "--kv-offloading-backend",
        "lmcache",
        "--kv-offloading-size",
        "8",
        "--grid",
        "lmcache-max-local-disk-size=unset,16",
    ];
    for r in priced(&lmcache) {
        let disk = match r["knobs"]["lmcache-max-local-disk-size"].as_str().unwrap() {
            "unset" => 0.0,
            size => 2.0 * size.parse::<f64>().unwrap(),
        };
        check(&r, 8.0, disk);
    }
    let hicache = ["--engine", "sglang", "--tp", "2", "--max-total-tokens", "3000", "--enable-hierarchical-cache"];
    let host_pool =
        priced(&hicache)[0]["cost"]["host_gib"].as_f64().unwrap() / priced(&hicache)[0]["instances"].as_f64().unwrap();
    let file: Vec<&str> = hicache
        .iter()
        .chain(&[
            "--hicache-storage-backend",
            "file",
            "--hicache-storage-backend-extra-config",
            r#"{"max_size":"2Gi"}"#,
        ])
        .copied()
        .collect();
    check(&priced(&file)[0], host_pool, 4.0);
    let mooncake: Vec<&str> = hicache.iter().chain(&["--hicache-storage-backend", "mooncake"]).copied().collect();
    check(&priced(&mooncake)[0], host_pool + 4.0, 0.0);
    // The refusals.
    let disk_no_price: Vec<&str> =
        base.iter().chain(&lmcache[..8]).chain(&["--lmcache-max-local-disk-size", "16"]).copied().collect();
    let err = fails(&disk_no_price);
    assert!(err.contains("--lmcache-max-local-disk-size in a priced plan needs --ssd-price USD_PER_GIB_HOUR"), "{err}");
    let unbounded: Vec<&str> = base
        .iter()
        .chain(&hicache)
        .chain(&["--hicache-storage-backend", "file", "--ssd-price", "0.0001"])
        .copied()
        .collect();
    let err = fails(&unbounded);
    assert!(err.contains("--hicache-storage-backend file without a max_size cannot be priced"), "{err}");
    // LMCache's lm:// server never evicts: no size prices it.
    let server: Vec<&str> =
        base.iter().chain(&lmcache[..8]).chain(&["--lmcache-remote-url", "lm://cache:65432"]).copied().collect();
    let err = fails(&server);
    assert!(err.contains("--lmcache-remote-url cannot be priced"), "{err}");
    let no_target = ["plan", "--num-prompts", "4", "--slo", "ttft_p99=60", "--ssd-price", "0.01"];
    assert!(fails(&no_target).contains("--ssd-price prices deployments at a --target-rate"));
    assert!(fails(&["plan", "--slo", "ttft_p99=60", "--target-rate", "10", "--ssd-price", "nan"]).contains("GiB-hour"));
}

#[test]
fn list_flags_are_grid_axes() {
    let base = ["sweep", "--num-prompts", "6", "--request-rate", "20"];
    let a: Vec<&str> =
        base.iter().copied().chain(["--max-num-seqs", "2,4", "--tp=1..2", "--gpus", "h100-sxm,l40s"]).collect();
    let b: Vec<&str> = base
        .iter()
        .copied()
        .chain(["--grid", "max-num-seqs=2,4", "--grid", "tp=1..2", "--grid", "gpu=h100-sxm,l40s"])
        .collect();
    let out = ok(&a);
    assert_eq!(out, ok(&b));
    assert!(out.contains("8 points"), "{out}");
    // One value stays a plain flag.
    let c: Vec<&str> = base.iter().copied().chain(["--max-num-seqs", "4"]).collect();
    assert!(ok(&c).contains("1 point"));
}

#[test]
fn the_plan_figure_and_its_search_points() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("plan.svg");
    let args = [
        "plan",
        "--num-prompts",
        "40",
        "--slo",
        "ttft_p99=300,tpot_p99=40",
        "--max-num-seqs",
        "4,16",
        "--plot",
        svg.to_str().unwrap(),
        "--json",
    ];
    let doc: Value = serde_json::from_str(&ok(&args)).unwrap();
    for r in doc["results"].as_array().unwrap() {
        let trials = r["trials"].as_array().unwrap();
        assert_eq!(trials.len() as u64, r["simulations"].as_u64().unwrap());
        // The rate reported is the highest that met the SLO; the bracket's top failed it.
        let max = r["max_rate"].as_f64().unwrap();
        let best =
            trials.iter().filter(|t| t["meets"] == true).map(|t| t["rate"].as_f64().unwrap()).fold(0.0, f64::max);
        assert_eq!(best, max);
        let fails_at = r["fails_at"].as_f64().unwrap();
        assert!(trials.iter().any(|t| t["rate"].as_f64() == Some(fails_at) && t["meets"] == false));
        assert!(trials.iter().filter(|t| t["meets"] == false).all(|t| t["rate"].as_f64().unwrap() > max));
    }
    let text = std::fs::read_to_string(&svg).unwrap();
    for want in [
        "p99_ttft_ms (limit 300 ms)",
        "p99_tpot_ms (limit 40 ms)",
        "SLO limit",
        "--max-num-seqs 16",
        "--max-num-seqs 4",
    ] {
        assert!(text.contains(want), "the figure lacks {want}");
    }
    assert!(fails(&["plan", "--slo", "ttft_p99=1", "--plot", "x.pdf"]).contains(".svg or .png"));
}

#[test]
fn plan_output_does_not_depend_on_the_thread_count() {
    let run = |threads: &str, extra: &[&str]| {
        let mut args =
            vec!["plan", "--num-prompts", "30", "--slo", "ttft_p99=200", "--max-num-seqs", "2,4,8,16", "--json"];
        args.extend(extra);
        common::ok_at_threads(&args, threads)
    };
    assert_eq!(run("1", &[]), run("2", &[]));
    let deploy = ["--target-rate", "5", "--gpus", "h100-sxm,l40s", "--gpu-price", "h100-sxm=2,l40s=1"];
    assert_eq!(run("1", &deploy), run("2", &deploy));
}

/// With `--instances 1..8` the fewest instances meeting the SLO are found by bisection (the most
/// first, then halving: 4 simulations, not 8), and the answer checks out against plain runs: one
/// instance fewer misses the SLO, the count found gives exactly the values reported. At equal
/// cost per hour, fewer GPUs win.
#[test]
fn the_fewest_instances_by_bisection() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("r300.jsonl");
    let trace = trace.to_str().unwrap();
    ok(&[
        "gen",
        "random",
        "--num-prompts",
        "300",
        "--input-len",
        "1000",
        "--output-len",
        "100",
        "--range-ratio",
        "0.5",
        "-o",
        trace,
    ]);
    // The raw roofline keeps the hand-checked instance counts apart from any calibration.
    let base = ["--trace", trace, "--slo", "ttft_p99=300", "--target-rate", "40", "--calibration", "none"];
    let mut args = vec!["plan"];
    args.extend(base);
    args.extend(["--gpus", "l40s,h100-sxm", "--instances", "1..8", "--gpu-price", "l40s=1,h100-sxm=3", "--json"]);
    let doc: Value = serde_json::from_str(&ok(&args)).unwrap();
    assert_eq!(doc["instances_searched"], serde_json::json!([1, 2, 3, 4, 5, 6, 7, 8]));
    let r = doc["results"].as_array().unwrap();
    // h100-sxm: 1 instance at $3/h; l40s: 3 instances at $3/h; 1 GPU beats 3.
    assert_eq!((r[0]["gpu"].as_str(), r[0]["instances"].as_u64()), (Some("h100-sxm"), Some(1)));
    assert_eq!((r[1]["gpu"].as_str(), r[1]["instances"].as_u64()), (Some("l40s"), Some(3)));
    assert_eq!(r[1]["tried"], serde_json::json!([[8, true], [4, true], [2, false], [3, true]]));
    assert_eq!(r[0]["tried"], serde_json::json!([[8, true], [4, true], [2, true], [1, true]]));
    assert_eq!(doc["simulations"], 8);
    let p99 = |n: &str| -> f64 {
        let out = ok(&[
            "run",
            "--trace",
            trace,
            "--request-rate",
            "40",
            "--gpu",
            "l40s",
            "--instances",
            n,
            "--calibration",
            "none",
            "--json",
        ]);
        serde_json::from_str::<Value>(&out).unwrap()["p99_ttft_ms"].as_f64().unwrap()
    };
    assert!(p99("2") > 300.0);
    assert_eq!(p99("3"), r[1]["at_target"]["slo_values"]["p99_ttft_ms"].as_f64().unwrap());
    args.pop();
    let text = ok(&args);
    assert!(
        text.contains("fewest instances among 1..8 meeting the SLO at 40 req/s, bisected per configuration"),
        "{text}"
    );
    assert!(text.contains("8 simulations instead of 16"), "{text}");
    assert!(text.contains("Cheapest: 1 × h100-sxm TP1 (1 GPU) serves 40 req/s"), "{text}");
}

/// Each highest rate has its error bar: the rates the SLO allows if cachesim errs as at either
/// end of its errors on the nearest measured runs, searched again with each limit × (1 + error):
/// the cautious end is at most the hopeful one, the best configuration is near itself, and a
/// configuration far below it is told apart.
#[test]
fn plan_rates_have_error_bars() {
    let args = ["plan", "--slo", "ttft_p99=500,tpot_median=30", "--grid", "max-num-seqs=1,4,16", "--max-rate", "1000"];
    let v: Value = serde_json::from_str(&ok(&[&args[..], &["--json"]].concat())).unwrap();
    let results = v["results"].as_array().unwrap();
    for r in results {
        let bar = &r["rate_bar"];
        let (low, high) = (bar["low"].as_f64().unwrap(), bar["high"].as_f64().unwrap());
        assert!(low <= high * 1.01, "{r}");
        let tpot = &bar["spreads"]["median_tpot_ms"];
        assert_eq!(tpot["nearest"], "same GPU, engine family and model class", "{r}");
        assert!(bar["spreads"]["p99_ttft_ms"]["rows"].as_u64().unwrap() >= 8, "{r}");
    }
    let near: Vec<Option<bool>> = results.iter().map(|r| r["within_error_of_best"].as_bool()).collect();
    assert_eq!(near, [Some(false), Some(false), Some(true)], "1 and 4 sequences serve far less than 16: {v}");
    let text = ok(&args);
    assert!(text.contains(" if off  near best "), "{text}");
    assert!(text.contains("req/s if cachesim is off as on its nearest measured runs"), "{text}");
}

/// A deployment's instance count has its error bar: the fewest instances under the SLO scaled
/// by the nearest runs' errors. Here the TTFT errors span zero (cachesim both too fast and too
/// slow on the nearest H100 runs), so the hopeful end is at most the count found and the cautious
/// end at least it (an end that needs more than the most tried is `null`).
#[test]
fn deployments_have_instance_error_bars() {
    let args = [&DEPLOY[..], &["--instances", "1..8", "--json"]].concat();
    let v: Value = serde_json::from_str(&ok(&args)).unwrap();
    let mut sized = 0;
    for d in v["results"].as_array().unwrap() {
        let Some(n) = d["instances"].as_u64() else { continue };
        let bar = &d["instances_if_off"];
        let hopeful = bar["hopeful"].as_u64().unwrap();
        assert!(hopeful <= n, "{d}");
        if let Some(cautious) = bar["cautious"].as_u64() {
            assert!(cautious >= n, "{d}");
        }
        assert!(bar["spreads"]["p99_tpot_ms"]["rows"].as_u64().unwrap() >= 8, "{d}");
        sized += 1;
    }
    assert!(sized >= 2, "{v}");
    let text = ok(&[&DEPLOY[..], &["--instances", "1..8"]].concat());
    assert!(text.contains(" instances   if off  GPUs "), "{text}");
}

/// A class's SLO (`ttft_p99@0`) is searched over that class's requests: vLLM's priority policy,
/// which serves class 0 first, sustains a higher rate for it than FCFS does; the table and JSON
/// name the class; a class no request has is refused.
#[test]
fn a_class_slo_counts_its_class() {
    let args = [
        "plan",
        "--slo",
        "ttft_p99@0=200",
        "--priority-mix",
        "0:0.2,1:0.8",
        "--grid",
        "scheduling-policy=fcfs,priority",
        "--max-num-seqs",
        "8",
        "--json",
    ];
    let v: Value = serde_json::from_str(&ok(&args)).unwrap();
    let rate = |policy: &str| {
        let r = v["results"].as_array().unwrap().iter().find(|r| r["scheduling-policy"] == policy).unwrap();
        assert!(r["at_max_rate"]["slo_values"]["p99_ttft_ms@0"].as_f64().unwrap() <= 200.0, "{r}");
        r["max_rate"].as_f64().unwrap()
    };
    assert!(rate("priority") > rate("fcfs"), "{v}");
    let e = fails(&["plan", "--slo", "ttft_p99@5=200", "--priority-mix", "0:0.2,1:0.8"]);
    assert!(
        e.contains("no request of traces/sessions.jsonl (built-in sample) has priority 5 (its classes: 0, 1"),
        "{e}"
    );
}
