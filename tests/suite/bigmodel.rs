//! The two H20 DeepSeek-R1 seed deployments (`calibration/deployments/*.toml`) end to end on a
//! ShareGPT workload of the seed runs' size (1,000 first turns, rate inf): each file's flags are
//! run with `--deployment`; the full report is printed beside the real one, and the KV
//! sizing is checked by hand. Skipped (with a printed reason) without the shared data.

use crate::common;

use serde_json::Value;
use std::path::{Path, PathBuf};

fn deployments() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration/deployments")
}

/// The deployment file on the seed's workload: 1,000 ShareGPT first turns at rate inf.
fn command(file: &str, data: &Path) -> Vec<String> {
    let trace = data.join("traces/sharegpt/sharegpt_v3_head.jsonl.gz");
    [
        "--deployment",
        &deployments().join(file).display().to_string(),
        "--trace",
        &trace.display().to_string(),
        "--turns",
        "first",
        "--num-prompts",
        "1000",
        "--request-rate",
        "inf",
    ]
    .map(String::from)
    .to_vec()
}

fn run(args: &[String], extra: &[&str]) -> String {
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.extend_from_slice(extra);
    common::ok(&all)
}

fn json(args: &[String], extra: &[&str]) -> Value {
    let mut e = extra.to_vec();
    e.push("--json");
    serde_json::from_str(&run(args, &e)).unwrap()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap()
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn vllm_tp8_pp2_runs_end_to_end() {
    let Some(data) = common::data_dir() else { return };
    let args = command("h20-dsr1-vllm-tp8pp2.toml", &data);
    println!("cachesim {}\n{}", args.join(" "), run(&args, &[]));
    let v = json(&args, &[]);
    assert_eq!(u(&v["completed"]), 1000);
    let c = &v["config"];
    // 61 layers over 2 stages: the larger has 31, each caching the 576-element latent in bf16.
    assert_eq!(u(&c["kv_bytes_per_token_per_rank"]), 31 * 576 * 2);
    assert_eq!(u(&c["kv_bytes_per_token"]), 61 * 576 * 2);
    // Weights per GPU: (671 B at 1 byte + embedding and LM head at 2) / 16.
    let weights: f64 = (671e9 + 2.0 * 129_280.0 * 7168.0) / 16.0;
    assert_eq!(u(&c["vllm_memory"]["weights_bytes"]), weights.round() as u64);
    // vLLM 0.8's V0 (the file says why): prefix caching off, so the pool is the KV budget over
    // 35,712 B a token, split between the two virtual engines.
    let kv = u(&c["vllm_memory"]["kv_cache_bytes"]);
    assert_eq!(u(&c["kv_capacity_tokens"]), kv / 35_712);
    assert_eq!(c["cache"]["policy"], "none");
    assert_eq!(c["deployment"]["parallel"]["pp"], 2);
    let e = &c["engine"];
    assert_eq!((e["engine"].as_str(), e["version"].as_str()), (Some("vllm-v0"), Some("VllmV008")));
    assert_eq!(u(&e["virtual_engines"]), 2);
    // V0's defaults for an MLA model: 256 sequences, no chunked prefill, a budget of
    // max_model_len (163,840); no async output processing under PP.
    assert_eq!((u(&e["max_num_seqs"]), u(&e["max_num_batched_tokens"])), (256, 163_840));
    assert_eq!((e["enable_chunked_prefill"].as_bool(), e["async_output_proc"].as_bool()), (Some(false), Some(false)));
    assert_eq!(e["overlap"], false);
    assert!(run(&args, &[]).contains("2 virtual engines (a scheduler, the limits above and 1/2 of the KV blocks each)"));
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn sglang_tp16_mtp_runs_end_to_end_with_both_kv_capacities() {
    let Some(data) = common::data_dir() else { return };
    let args = command("h20-dsr1-sglang-tp16-mtp.toml", &data);
    println!("cachesim {}\n{}", args.join(" "), run(&args, &[]));
    let v = json(&args, &[]);
    assert_eq!(u(&v["completed"]), 1000);
    let c = &v["config"];
    // MLA under TP: every one of the 16 ranks caches the whole latent of every token.
    assert_eq!(u(&c["kv_bytes_per_token_per_rank"]), 70_272);
    let frac = c["mem_fraction_static"].as_f64().unwrap();
    let mem = 97_871.0 * 1_048_576.0 * frac;
    let weights: f64 = (671e9 + 2.0 * 129_280.0 * 7168.0) / 16.0;
    assert_eq!(u(&c["kv_capacity_tokens"]), ((mem - weights) / 70_272.0) as u64);
    let spec = &c["deployment"]["spec"];
    assert_eq!((spec["algorithm"].as_str(), u(&spec["k"])), (Some("mtp"), 3));
    // SGLang's overlap scheduler is off under EAGLE/MTP (the file says why).
    assert_eq!(c["engine"]["overlap"], false);
    // With DP attention (16 groups) each rank holds the whole attention (MLA projections:
    // 61 × 187,105,280 parameters at 1 byte) and a sixteenth of the rest, and caches only its
    // own requests: the instance holds 16 pools.
    let dp = json(&args, &["--enable-dp-attention", "--enable-expert-parallel"]);
    let c = &dp["config"];
    let attn = 61.0 * 187_105_280.0;
    let weights_dp = attn + (671e9 + 2.0 * 129_280.0 * 7168.0 - attn) / 16.0;
    let frac = c["mem_fraction_static"].as_f64().unwrap();
    let per_rank = ((97_871.0 * 1_048_576.0 * frac - weights_dp) / 70_272.0) as u64;
    assert_eq!(u(&c["kv_capacity_tokens"]), 16 * per_rank);
    println!(
        "KV capacity, TP 16: {} tokens; with DP attention 16: {} tokens",
        u(&v["config"]["kv_capacity_tokens"]),
        u(&c["kv_capacity_tokens"])
    );
}

#[test]
fn big_model_flags_are_checked() {
    // Each refusal names its flag.
    for (args, flag) in [
        (vec!["--model", "deepseek-r1", "--gpu", "h20", "--tp", "16", "--nnodes", "3"], "--nnodes"),
        (vec!["--model", "deepseek-r1", "--gpu", "h20", "--tp", "8", "--dp-size", "2"], "--dp-size"),
        (
            vec![
                "--engine",
                "sglang",
                "--model",
                "deepseek-r1",
                "--gpu",
                "h20",
                "--tp",
                "8",
                "--enable-dp-attention",
                "--dp-size",
                "3",
            ],
            "--dp-size",
        ),
        (vec!["--speculative-algorithm", "mtp"], "--speculative-algorithm"),
        (vec!["--speculative-algorithm", "eagle"], "--spec-acceptance-rate"),
        (vec!["--num-speculative-tokens", "2"], "--num-speculative-tokens"),
        (vec!["--enable-expert-parallel", "--tp", "2"], "--enable-expert-parallel"),
        (vec!["--model", "qwen3-30b-a3b", "--moe-skew", "1"], "--moe-skew"),
        (
            vec!["--model", "deepseek-r1", "--gpu", "h20", "--tp", "16", "--nnodes", "2", "--network", "nope"],
            "--network",
        ),
    ] {
        let err = common::fails(&args);
        assert!(err.contains(flag), "{args:?}: {err}");
    }
    // DeepSeek-R1's 673 GB of weights (84 GB a GPU at TP 8) do not fit 8 A100-40GBs.
    let err = common::fails(&["--model", "deepseek-r1", "--gpu", "a100-40gb", "--tp", "8"]);
    assert!(err.contains("does not fit"), "{err}");
}

/// A speculative step streams its drafts and its token in one chunk. sglang bench_serving (the
/// default `--report-style`) divides the chunk's gap over its tokens when it reads SGLang's
/// native stream, from 0.4.3.post3 on; `--client-itl chunk` counts one gap per chunk, as
/// `vllm bench serve` and older clients do. TPOT and throughput do not depend on it; the echo
/// names the rule only where it divides, and a vLLM run counts chunks by default.
#[test]
fn the_client_counts_a_speculative_chunk_as_it_does() {
    let run = |extra: &[&str]| -> Value {
        let base = ["--engine", "sglang", "--speculative-algorithm", "eagle", "--num-speculative-tokens", "3"];
        let args: Vec<&str> =
            base.iter().chain(&["--spec-acceptance-rate", "0.8", "--json"]).chain(extra).copied().collect();
        serde_json::from_str(&common::ok(&args)).unwrap()
    };
    let (token, chunk) = (run(&[]), run(&["--client-itl", "chunk"]));
    assert_eq!(token["config"]["client_itl"], "token");
    assert!(chunk["config"].get("client_itl").is_none());
    for k in ["median_tpot_ms", "mean_tpot_ms", "output_throughput", "mean_ttft_ms"] {
        assert_eq!(token[k], chunk[k], "{k}");
    }
    // About 1 + 0.8 + 0.64 + 0.51 = 2.95 tokens a chunk: the per-token mean ITL is the chunks'
    // gaps over all their tokens.
    let ratio = chunk["mean_itl_ms"].as_f64().unwrap() / token["mean_itl_ms"].as_f64().unwrap();
    assert!((2.6..3.2).contains(&ratio), "{ratio}");
    let vllm: Value = serde_json::from_str(&common::ok(&["--json"])).unwrap();
    assert!(vllm["config"].get("client_itl").is_none());
    // The text report's `Client:` line says how, where chunks carry several tokens.
    let base = ["--engine", "sglang", "--speculative-algorithm", "eagle", "--spec-acceptance-rate", "0.8"];
    let client = |extra: &[&str]| -> String {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        common::ok(&args).lines().find(|l| l.starts_with("Client:")).unwrap().to_string()
    };
    assert!(client(&[]).ends_with(" · ITL per token (a chunk's gap over its tokens)"), "{}", client(&[]));
    assert!(client(&["--client-itl", "chunk"]).ends_with(" · ITL per streamed chunk"));
    let plain = common::ok(&["--engine", "sglang"]);
    assert!(!plain.lines().find(|l| l.starts_with("Client:")).unwrap().contains("ITL"));
}
