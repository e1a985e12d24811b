//! Coalesced decode steps print the same bytes: the README's and the guides' run commands (the
//! bundled sample, every output file, clusters under each router, failures, autoscaling, PD, a
//! pipeline-parallel deployment, sliding-window and chunked attention, TensorRT-LLM, the Mooncake
//! and ShareGPT traces) run with and without `--no-step-coalescing`, and their stdout and every file they
//! write are compared byte for byte. The golden schedules are compared both ways in `golden_vllm.rs`, random workloads in
//! the core's `sim::coalesce_tests`.

use crate::common;
use std::path::Path;

/// Runs `args` (relative paths from the repository; `{dir}` replaced by a scratch folder of its
/// own) with and without coalescing; fails on any difference in stdout or in the files written
/// into the folder.
fn same_both_ways(name: &str, args: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut outputs = Vec::new();
    for extra in [&[][..], &["--no-step-coalescing"][..]] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let mut full: Vec<String> = args.iter().map(|a| a.replace("{dir}", d)).collect();
        full.extend(extra.iter().map(|s| s.to_string()));
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cachesim"))
            .args(&full)
            .current_dir(root)
            .env("RAYON_NUM_THREADS", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: cachesim {full:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())
            })
            .collect();
        files.sort();
        outputs.push((out.stdout, files));
    }
    let (a, b) = (&outputs[0], &outputs[1]);
    assert!(a.0 == b.0, "{name}: stdout differs with --no-step-coalescing");
    assert_eq!(a.1.len(), b.1.len(), "{name}: different files written");
    for ((fa, xa), (fb, xb)) in a.1.iter().zip(&b.1) {
        assert_eq!(fa, fb);
        assert!(xa == xb, "{name}: {fa} differs with --no-step-coalescing");
    }
}

#[test]
fn the_bundled_sample_and_every_output_file_are_the_same_coalesced_or_not() {
    let files = [
        "--requests-csv",
        "{dir}/req.csv",
        "--timeline-csv",
        "{dir}/tl.csv",
        "--token-times-csv",
        "{dir}/tok.csv",
        "--plot",
        "{dir}/plot.svg",
    ];
    for (name, args) in [
        ("sample", vec!["run"]),
        ("sample-json", vec!["run", "--json", "--ttft-breakdown"]),
        ("sample-vllm-style", vec!["run", "--report-style", "vllm", "--goodput", "ttft:500,tpot:20"]),
        ("sample-files", [&["run"][..], &files].concat()),
        ("priority", vec!["run", "--scheduling-policy", "priority", "--priority-mix", "0:0.3,1:0.7", "--json"]),
        ("small-pool", vec!["run", "--num-gpu-blocks-override", "400", "--max-num-seqs", "32", "--json"]),
        ("concurrency", vec!["run", "--max-concurrency", "4", "--json"]),
        ("cluster-files", [&["run", "--instances", "3", "--router", "least-load"][..], &files].concat()),
        ("cluster-kv-aware", vec!["run", "--instances", "4", "--router", "kv-aware", "--json"]),
        ("cluster-rr", vec!["run", "--instances", "2", "--router", "round-robin", "--max-concurrency", "8"]),
        ("failures", vec!["run", "--instances", "3", "--fail-at", "5:1", "--json"]),
        (
            "autoscale",
            vec![
                "run",
                "--instances",
                "1",
                "--autoscale",
                "hpa",
                "--scale-metric",
                "in-flight",
                "--max-instances",
                "4",
                "--scale-target",
                "2",
                "--hpa-sync-period-s",
                "1",
                "--cold-start-s",
                "2",
                "--json",
            ],
        ),
        ("pd", vec!["run", "--prefill-instances", "1", "--decode-instances", "2", "--json"]),
        ("pp", vec!["run", "--model", "llama-3.1-70b", "--gpu", "a100-80gb", "--tp", "4", "--pp", "2", "--json"]),
        ("seeds", vec!["run", "--request-rate", "8", "--seeds", "3"]),
        // Sliding-window layers priced over the window: the decodes' reads stop growing at it.
        ("sliding", vec!["run", "--model", "gpt-oss-20b", "--disable-hybrid-kv-cache-manager", "--json"]),
        // vLLM's hybrid manager: sliding groups beside a full one, six of them, or one alone.
        ("hybrid", vec!["run", "--model", "gpt-oss-20b", "--requests-csv", "{dir}/r.csv", "--json"]),
        ("hybrid-gemma", vec!["run", "--model", "gemma-3-27b", "--tp", "2", "--json"]),
        // TensorRT-LLM: requests take their blocks to completion; a small pool refuses heads.
        ("trtllm", vec!["run", "--engine", "trtllm", "--requests-csv", "{dir}/r.csv", "--json"]),
        ("trtllm-small-pool", vec!["run", "--engine", "trtllm", "--num-gpu-blocks-override", "300", "--json"]),
        ("hybrid-every-layer", vec!["run", "--model", "mistral-7b-v0.1", "--instances", "2", "--json"]),
    ] {
        same_both_ways(name, &args);
    }
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn the_real_traces_are_the_same_coalesced_or_not() {
    let Some(data) = common::data_dir() else { return };
    let mooncake = data.join("traces/mooncake/conversation_trace.jsonl");
    let sharegpt = data.join("traces/sharegpt/sharegpt_v3_head.jsonl.gz");
    let (m, s) = (mooncake.to_str().unwrap(), sharegpt.to_str().unwrap());
    let engine = [
        "--block",
        "16",
        "--num-gpu-blocks-override",
        "16384",
        "--max-num-seqs",
        "256",
        "--max-num-batched-tokens",
        "8192",
    ];
    for (name, args) in [
        ("mooncake-1000", [&["--trace", m, "--num-prompts", "1000", "--json"][..], &engine].concat()),
        (
            // TensorRT-LLM with block reuse on Mooncake's shared prefixes, heads refused for room.
            "mooncake-trtllm",
            [&["--trace", m, "--num-prompts", "1000", "--engine", "trtllm", "--json"][..], &engine].concat(),
        ),
        (
            "mooncake-16-kv",
            [
                &["--trace", m, "--num-prompts", "3000", "--instances", "16", "--router", "kv-aware", "--json"][..],
                &engine,
            ]
            .concat(),
        ),
        (
            "mooncake-8-aibrix",
            [
                &[
                    "--trace",
                    m,
                    "--num-prompts",
                    "2000",
                    "--instances",
                    "8",
                    "--router",
                    "aibrix",
                    "--timeline-csv",
                    "{dir}/tl.csv",
                ][..],
                &engine,
            ]
            .concat(),
        ),
        (
            // Chunked layers (Llama 4): Mooncake's long prompts cross 8,192-token chunk starts.
            "mooncake-chunked",
            [
                &[
                    "--trace",
                    m,
                    "--num-prompts",
                    "300",
                    "--model",
                    "llama-4-scout",
                    "--tp",
                    "4",
                    "--max-model-len",
                    "131072",
                    "--json",
                ][..],
                &engine,
            ]
            .concat(),
        ),
        (
            // vLLM's hybrid manager over a fleet: its stretches run while no head is refused.
            "mooncake-16-hybrid",
            [
                &["--trace", m, "--num-prompts", "3000", "--instances", "16", "--model", "gpt-oss-20b", "--json"][..],
                &engine,
            ]
            .concat(),
        ),
        (
            "sharegpt-rate",
            vec!["--trace", s, "--turns", "first", "--num-prompts", "500", "--request-rate", "8", "--json"],
        ),
        (
            "sharegpt-sessions",
            vec!["--trace", s, "--num-prompts", "300", "--instances", "2", "--router", "cache-aware", "--json"],
        ),
    ] {
        same_both_ways(name, &args);
    }
}
