//! The benchmark clients' ShareGPT sampling on the real ShareGPT V3 file (the 17,671-record
//! head in the shared data folder), checked against an independent Python computation: the
//! clients' own steps (`len(conversations) >= 2`, `random.seed(seed)`, `random.shuffle`, walk,
//! length rules, first N) run by CPython 3.11 with the `chars4` token count,
//! `(len(text) + 3) // 4`, as the tokenizer. Kept and dropped counts per rule, the first ten
//! (prompt, output) lengths and the sums over the N sampled must all agree. Skipped (with a
//! printed reason) when the data is absent, unless CACHESIM_REQUIRE_DATA=1.

use crate::common;

use cachesim::tokenize::TokenizerKind;
use cachesim::trace::ReadOptions;
use cachesim::workload::arrivals::{schedule, ArrivalOptions};
use cachesim::workload::{BuildOptions, DatasetFilter, Turns, Workload};

struct Expect {
    kept: usize,
    dropped: &'static [(&'static str, u64)],
    first10: [(u32, u32); 10],
    /// (sampled, Σ prompt, Σ output) over the first N.
    sums: (usize, u64, u64),
}

fn load(filter: DatasetFilter, fixed: Option<u32>, context: Option<u32>) -> Option<Workload> {
    let dir = common::data_dir()?;
    let path = dir.join("traces/sharegpt/sharegpt_v3_head.jsonl.gz");
    let opts = BuildOptions {
        tokenizer: TokenizerKind::Chars4,
        turns: Turns::First,
        sharegpt_output_len: fixed,
        dataset_filter: filter,
        sharegpt_context_len: context,
        ..BuildOptions::default()
    };
    Some(cachesim::load_workload(Some(&path), &ReadOptions::default(), &opts).expect("the ShareGPT head loads"))
}

fn check(w: &Workload, seed: u64, n: usize, e: &Expect) {
    assert_eq!(w.requests.len(), e.kept, "kept");
    let mut dropped: Vec<(String, u64)> = w.info.skipped.reasons.iter().map(|(r, c)| (r.to_string(), *c)).collect();
    dropped.sort();
    let want: Vec<(String, u64)> = e.dropped.iter().map(|&(r, c)| (r.to_string(), c)).collect();
    assert_eq!(dropped, want, "dropped per rule");
    let sends = schedule(w, &ArrivalOptions { num_prompts: Some(n), seed, ..ArrivalOptions::default() }).unwrap();
    let lens: Vec<(u32, u32)> =
        sends.iter().map(|&(id, _)| (w.requests[id as usize].prompt_len, w.requests[id as usize].output_len)).collect();
    assert_eq!(lens[..10], e.first10, "the first ten of the client's sample");
    let sums = (
        lens.len(),
        lens.iter().map(|&(p, _)| p as u64).sum::<u64>(),
        lens.iter().map(|&(_, o)| o as u64).sum::<u64>(),
    );
    assert_eq!(sums, e.sums, "(sampled, Σ prompt, Σ output)");
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn vllm_bench_serve_sample() {
    let Some(w) = load(DatasetFilter::Vllm, None, None) else { return };
    check(
        &w,
        0,
        1000,
        &Expect {
            kept: 15633,
            dropped: &[
                ("fewer than 2 messages", 271),
                ("vllm filter: prompt + output over 2048 tokens", 13),
                ("vllm filter: prompt over 1024 tokens", 837),
                ("vllm filter: prompt under 4 tokens", 318),
                ("vllm filter: reply under 4 tokens", 599),
            ],
            first10: [
                (14, 417),
                (247, 216),
                (96, 390),
                (14, 463),
                (268, 52),
                (147, 629),
                (863, 8),
                (714, 41),
                (58, 46),
                (32, 422),
            ],
            sums: (1000, 254_327, 214_618),
        },
    );
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn vllm_fixed_output_skips_the_reply_rule() {
    let Some(w) = load(DatasetFilter::Vllm, Some(256), None) else { return };
    check(
        &w,
        3,
        500,
        &Expect {
            kept: 16209,
            dropped: &[
                ("fewer than 2 messages", 271),
                ("vllm filter: prompt over 1024 tokens", 873),
                ("vllm filter: prompt under 4 tokens", 318),
            ],
            first10: [
                (116, 256),
                (386, 256),
                (835, 256),
                (228, 256),
                (824, 256),
                (51, 256),
                (223, 256),
                (470, 256),
                (11, 256),
                (21, 256),
            ],
            sums: (500, 122_637, 128_000),
        },
    );
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn sglang_bench_serving_sample() {
    let Some(w) = load(DatasetFilter::Sglang, None, None) else { return };
    check(
        &w,
        1,
        1000,
        &Expect {
            kept: 17131,
            dropped: &[
                ("fewer than 2 messages", 271),
                ("sglang filter: output under 2 tokens", 130),
                ("sglang filter: prompt under 2 tokens", 139),
            ],
            first10: [
                (272, 50),
                (32, 284),
                (38, 496),
                (8, 112),
                (7, 598),
                (368, 42),
                (494, 202),
                (442, 149),
                (1114, 666),
                (141, 35),
            ],
            sums: (1000, 326_105, 246_541),
        },
    );
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn sglang_context_len() {
    let Some(w) = load(DatasetFilter::Sglang, None, Some(1500)) else { return };
    check(
        &w,
        0,
        200,
        &Expect {
            kept: 16337,
            dropped: &[
                ("fewer than 2 messages", 271),
                ("sglang filter: output under 2 tokens", 130),
                ("sglang filter: prompt + output over --sharegpt-context-len", 794),
                ("sglang filter: prompt under 2 tokens", 139),
            ],
            first10: [
                (14, 417),
                (247, 216),
                (96, 390),
                (14, 463),
                (268, 52),
                (147, 629),
                (863, 8),
                (714, 41),
                (58, 46),
                (32, 422),
            ],
            sums: (200, 53_774, 38_796),
        },
    );
}

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&common::ok(args)).expect("JSON report")
}

#[test]
fn request_overhead_adds_exactly_to_ttft_and_e2e() {
    let base = json(&["--num-prompts", "1", "--json", "--request-overhead-ms", "0"]);
    let slow = json(&["--num-prompts", "1", "--json", "--request-overhead-ms", "50"]);
    let d = |k: &str| slow[k].as_f64().unwrap() - base[k].as_f64().unwrap();
    assert!((d("mean_ttft_ms") - 50.0).abs() < 1e-6, "{}", d("mean_ttft_ms"));
    assert!((d("mean_e2e_latency_ms") - 50.0).abs() < 1e-6);
    assert!(d("mean_tpot_ms").abs() < 1e-9);
    assert_eq!(slow["config"]["request_overhead_ms"], 50.0);
    let default = json(&["--num-prompts", "1", "--json"]);
    assert_eq!(default["config"]["request_overhead_ms"], cachesim::config::DEFAULT_REQUEST_OVERHEAD_MS);
    let d = default["mean_ttft_ms"].as_f64().unwrap() - base["mean_ttft_ms"].as_f64().unwrap();
    assert!((d - cachesim::config::DEFAULT_REQUEST_OVERHEAD_MS).abs() < 1e-6, "{d}");
    assert!(common::ok(&["--num-prompts", "1", "--request-overhead-ms", "12.5"]).contains("request overhead 12.5 ms"));
    assert!(common::fails(&["--request-overhead-ms=-1"]).contains("--request-overhead-ms"));
}

#[test]
fn arrival_process_follows_the_report_style() {
    let sgl = json(&["--num-prompts", "3", "--request-rate", "5", "--json"]);
    assert_eq!(sgl["config"]["arrivals"]["process"], "sglang");
    let vllm = json(&["--num-prompts", "3", "--request-rate", "5", "--json", "--report-style", "vllm"]);
    assert_eq!(vllm["config"]["arrivals"]["process"], "vllm");
    let e = common::fails(&["--num-prompts", "3", "--request-rate", "5", "--burstiness", "0.5"]);
    assert!(e.contains("--arrival-process vllm"), "{e}");
    common::ok(&["--num-prompts", "3", "--request-rate", "5", "--burstiness", "0.5", "--arrival-process", "vllm"]);
}

#[test]
fn dataset_filter_follows_the_report_style() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sg.json");
    // chars4 lengths: prompts of 3 and 8 tokens, replies of 8 and 2.
    let doc = r#"[{"id":"a","conversations":[{"from":"human","value":"aaaabbbbcccc"},{"from":"gpt","value":"rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr"}]},
                  {"id":"b","conversations":[{"from":"human","value":"pppppppppppppppppppppppppppppppp"},{"from":"gpt","value":"xxxxyyyy"}]},
                  {"id":"c","conversations":[{"from":"human","value":"alone"}]}]"#;
    std::fs::write(&path, doc).unwrap();
    let p = path.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut a = vec!["--trace", p, "--tokenizer", "chars4", "--turns", "first", "--json"];
        a.extend_from_slice(extra);
        json(&a)
    };
    // sglang keeps both (≥ 2 tokens each); vllm drops a (prompt 3) and b (reply 2).
    assert_eq!(run(&[])["trace"]["requests"], 2);
    let e = common::fails(&["--trace", p, "--tokenizer", "chars4", "--turns", "first", "--report-style", "vllm"]);
    assert!(e.contains("vllm filter: prompt under 4 tokens") && e.contains("vllm filter: reply under 4 tokens"), "{e}");
    assert_eq!(run(&["--report-style", "vllm", "--dataset-filter", "none"])["trace"]["requests"], 2);
    assert_eq!(run(&["--sharegpt-context-len", "10"])["trace"]["requests"], 1);
    let e = common::fails(&["--trace", p, "--turns", "first", "--report-style", "vllm", "--sharegpt-context-len", "9"]);
    assert!(e.contains("--dataset-filter sglang"), "{e}");
    let e = common::fails(&["--trace", p, "--turns", "first", "--sharegpt-output-len", "3"]);
    assert!(e.contains("output_len too small"), "{e}");
    let e = common::fails(&["--trace", p, "--dataset-filter", "vllm"]);
    assert!(e.contains("--turns first"), "{e}");
    // `cache` has no client: no filter unless asked for.
    let out = common::ok(&["cache", "--trace", p, "--tokenizer", "chars4", "--turns", "first", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["trace"]["requests"], 2);
}

#[test]
fn vllm_oversamples_a_short_sample_and_sglang_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sg.json");
    let pair = |p: usize, r: usize| {
        format!(
            r#"{{"conversations":[{{"from":"human","value":"{}"}},{{"from":"gpt","value":"{}"}}]}}"#,
            "p".repeat(p),
            "r".repeat(r)
        )
    };
    let doc = format!("[{},{},{}]", pair(20, 32), pair(40, 16), pair(72, 29));
    std::fs::write(&path, doc).unwrap();
    let p = path.to_str().unwrap();
    let base = ["--trace", p, "--tokenizer", "chars4", "--turns", "first", "--num-prompts", "8", "--json"];
    let completed = |style: &str| {
        let mut a = base.to_vec();
        a.extend(["--report-style", style]);
        json(&a)["completed"].as_u64().unwrap()
    };
    assert_eq!(completed("vllm"), 8, "3 kept, 5 repeats drawn by random.choice");
    assert_eq!(completed("sglang"), 3);
}
