//! The binary end to end: the quick-start run, JSON keys, errors naming file/line/field,
//! lenience, generators' determinism, and byte-identical output whatever the thread count.

use crate::common;

use common::{cachesim, fails, ok, ok_at_threads};

#[test]
fn quick_start_runs_on_the_bundled_sample() {
    let out = ok(&["cache"]);
    assert!(out.contains("traces/sessions.jsonl (built-in sample)"), "{out}");
    for policy in ["paged", "radix", "token", "none"] {
        assert!(out.lines().any(|l| l.starts_with(policy)), "no {policy} row:\n{out}");
    }
}

#[test]
fn json_report_has_the_documented_keys() {
    let out =
        ok(&["cache", "--policy", "paged,radix", "--block", "16,32", "--capacity-tokens", "unlimited,4k", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["trace"]["requests"], 160);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 6);
    for key in [
        "policy",
        "block_size",
        "page_size",
        "capacity_tokens",
        "requests",
        "prompt_tokens",
        "hit_tokens",
        "hit_ratio",
        "mean_request_hit_ratio",
        "evicted_tokens",
        "peak_used_tokens",
    ] {
        assert!(results.iter().all(|r| r.get(key).is_some()), "missing {key}");
    }
    assert!(results[0]["capacity_tokens"].is_null());
    assert_eq!(results[3]["capacity_tokens"], 4000);
    // Smaller capacity, fewer hits; every row within its capacity.
    assert!(results[3]["hit_tokens"].as_u64() <= results[0]["hit_tokens"].as_u64());
    assert!(results[3]["peak_used_tokens"].as_u64().unwrap() <= 4000);
}

#[test]
fn bad_input_names_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.jsonl");
    std::fs::write(
        &path,
        "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n\
         {\"timestamp\": 0, \"input_length\": \"ten\", \"output_length\": 2, \"hash_ids\": [1]}\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let err = fails(&["cache", "--trace", p]);
    assert!(err.contains("bad.jsonl") && err.contains("line 2") && err.contains("input_length"), "{err}");
    let out = ok(&["cache", "--trace", p, "--lenient"]);
    assert!(out.contains("Skipped:        1 records"), "{out}");
    let missing = fails(&["cache", "--trace", "/nonexistent/trace.jsonl"]);
    assert!(missing.contains("/nonexistent/trace.jsonl"), "{missing}");
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    assert!(fails(&["cache", "--trace", empty.to_str().unwrap()]).contains("empty"));
}

#[test]
fn gzip_is_read_transparently() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl.gz");
    let mut gz = flate2::write::GzEncoder::new(std::fs::File::create(&path).unwrap(), flate2::Compression::fast());
    gz.write_all(
        b"{\"prompt\": \"hello world\", \"output_len\": 2}\n{\"prompt\": \"hello world\", \"output_len\": 2}\n",
    )
    .unwrap();
    gz.finish().unwrap();
    let out = ok(&["cache", "--trace", path.to_str().unwrap(), "--policy", "radix", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["trace"]["format"], "native");
    // "hello world" is 2 cl100k tokens; the repeat hits 1 (the last is recomputed).
    assert_eq!(v["results"][0]["hit_tokens"], 1);
}

#[test]
fn generators_are_seeded_and_readable() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.jsonl");
    let b = dir.path().join("b.jsonl");
    let c = dir.path().join("c.jsonl");
    let args = |p: &std::path::Path, seed: &str| {
        vec![
            "gen",
            "gsp",
            "--num-groups",
            "4",
            "--prompts-per-group",
            "3",
            "--system-prompt-len",
            "64",
            "--question-len",
            "8",
            "--seed",
            seed,
            "-o",
        ]
        .into_iter()
        .map(String::from)
        .chain([p.to_str().unwrap().to_string()])
        .collect::<Vec<_>>()
    };
    for (p, seed) in [(&a, "1"), (&b, "1"), (&c, "2")] {
        let v = args(p, seed);
        ok(&v.iter().map(String::as_str).collect::<Vec<_>>());
    }
    let (ba, bb, bc) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap(), std::fs::read(&c).unwrap());
    assert_eq!(ba, bb);
    assert_ne!(ba, bc);
    let out = ok(&["cache", "--trace", a.to_str().unwrap(), "--policy", "radix", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["results"][0]["requests"], 12);
    // 4 groups × 3 prompts: every prompt after a group's first reuses the 64-token system prompt.
    assert!(v["results"][0]["hit_tokens"].as_u64().unwrap() >= 8 * 64);
    assert!(fails(&["gen", "random", "--input-len", "0"]).contains("--input-len"));
    assert!(fails(&["gen", "sessions", "--range-ratio", "2"]).contains("--range-ratio"));
}

/// `gen random` writes each request as it draws it; the bytes are those it wrote when it drew
/// them all first (recorded before the change), to the file and to stdout alike.
#[test]
fn gen_random_streams_the_bytes_it_always_wrote() {
    let expected = "{\"output_len\":2,\"prompt_ids\":[40,1,38]}\n{\"output_len\":2,\"prompt_ids\":[31,7,32,48]}\n\
                    {\"output_len\":2,\"prompt_ids\":[49,6,0]}\n";
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("g.jsonl");
    let args = ["gen", "random", "--num-prompts", "3", "--input-len", "4", "--output-len", "2", "--range-ratio", "0.5"];
    let args = [&args[..], &["--vocab", "50", "--seed", "9"]].concat();
    let summary = ok(&[&args[..], &["-o", f.to_str().unwrap()]].concat());
    assert_eq!(std::fs::read_to_string(&f).unwrap(), expected);
    assert!(summary.starts_with("gen random: 3 requests, 10 prompt ids written, 6 output tokens → "), "{summary}");
    assert_eq!(ok(&args), expected);
}

#[test]
fn output_is_identical_whatever_the_thread_count() {
    let run = |threads: &str| {
        let args = ["cache", "--capacity-tokens", "unlimited,3k,8k", "--block", "8,16", "--inflight", "3", "--json"];
        common::ok_at_threads(&args, threads)
    };
    assert_eq!(run("1"), run("2"));
    assert_eq!(run("1"), run("4"));
}

#[test]
fn help_teaches() {
    let out = cachesim(&["cache", "--help"]);
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in
        ["--policy", "--block", "--page-size", "--capacity-tokens", "--inflight", "--lenient", "--tokenizer", "--turns"]
    {
        assert!(help.contains(flag), "{flag} missing from --help");
    }
}

#[test]
fn analyze_reports_json_keys_and_draws_svg() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("a.svg");
    let out =
        ok(&["analyze", "--trace", "traces/gsp.jsonl", "--min-len", "100", "--json", "--plot", svg.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for key in [
        "conversations",
        "min_count",
        "min_len",
        "unit",
        "scope",
        "leaves",
        "repetition",
        "coverage",
        "mean_prefix_len",
        "median_prefix_len",
        "max_prefix_len",
        "top_prefixes",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    // 8 groups of 6 share a 256-token system prompt: 8 shared prefixes of 256 tokens.
    assert_eq!(v["unit"], "tokens");
    assert_eq!((v["conversations"].as_u64(), v["leaves"].as_u64()), (Some(48), Some(8)));
    assert_eq!(v["max_prefix_len"], 256);
    assert_eq!(v["coverage"], 1.0);
    assert_eq!(v["bounds"]["unlimited"].as_array().unwrap().len(), 5);
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.starts_with("<svg") && drawn.contains("Hit ratio vs KV capacity"));
    assert!(fails(&["analyze", "--plot", "x.gif"]).contains("name an .svg or .png file"));
}

#[test]
fn analyze_in_characters_needs_text() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.jsonl");
    std::fs::write(&path, "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n")
        .unwrap();
    let err = fails(&["analyze", "--trace", path.to_str().unwrap(), "--unit", "chars"]);
    assert!(err.contains("carries no text") && err.contains("--unit tokens"), "{err}");
    let text = dir.path().join("t.jsonl");
    std::fs::write(
        &text,
        "{\"prompt\": \"You are a helpful assistant. Tell me a joke about cats\", \"output_len\": 4}\n\
         {\"prompt\": \"You are a helpful assistant. Tell me a joke about dogs\", \"output_len\": 4}\n",
    )
    .unwrap();
    let out = ok(&["analyze", "--trace", text.to_str().unwrap(), "--min-len", "10", "--no-bounds", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["unit"].as_str(), v["leaves"].as_u64(), v["max_prefix_len"].as_u64()),
        (Some("chars"), Some(1), Some(50))
    );
    assert_eq!(v["top_prefixes"][0]["text"], "You are a helpful assistant. Tell me a joke about ");
}

#[test]
fn default_command_simulates_serving_in_both_layouts() {
    let sglang = ok(&[]);
    assert!(sglang.contains("============ Serving Benchmark Result ============"), "{sglang}");
    assert!(sglang.contains("Successful requests:                     160"), "{sglang}");
    assert!(sglang.contains("----------------End-to-End Latency----------------"));
    assert!(sglang.contains("Engine:         vllm@0.33 (v1) · max_num_seqs 1024 · max_num_batched_tokens 8192"));
    let vllm = ok(&["run", "--report-style", "vllm"]);
    assert!(vllm.contains("Failed requests:                         0"), "{vllm}");
    assert!(vllm.contains("---------------Inter-token Latency----------------"));
    let v: serde_json::Value = serde_json::from_str(&ok(&["--json", "--num-prompts", "40"])).unwrap();
    for key in [
        "completed",
        "total_input_tokens",
        "total_output_tokens",
        "duration",
        "request_throughput",
        "input_throughput",
        "output_throughput",
        "total_throughput",
        "mean_ttft_ms",
        "median_ttft_ms",
        "p99_ttft_ms",
        "mean_tpot_ms",
        "median_tpot_ms",
        "p99_tpot_ms",
        "mean_itl_ms",
        "median_itl_ms",
        "p95_itl_ms",
        "p99_itl_ms",
        "mean_e2e_latency_ms",
        "median_e2e_latency_ms",
        "concurrency",
    ] {
        assert!(v.get(key).is_some_and(|x| x.is_number()), "missing {key}");
    }
    assert_eq!(v["completed"], 40);
    assert_eq!(v["config"]["engine"]["max_num_seqs"], 1024);
    assert!(v["median_ttft_ms"].as_f64().unwrap() > 0.0);
    // Unknown profiles list the known ones.
    assert!(fails(&["--gpu", "tpu"]).contains("h100-sxm"));
}

#[test]
fn run_writes_request_and_step_csvs() {
    let dir = tempfile::tempdir().unwrap();
    let (req, steps, toks) = (dir.path().join("req.csv"), dir.path().join("steps.csv"), dir.path().join("t.csv"));
    ok(&[
        "--num-prompts",
        "20",
        "--requests-csv",
        req.to_str().unwrap(),
        "--timeline-csv",
        steps.to_str().unwrap(),
        "--token-times-csv",
        toks.to_str().unwrap(),
    ]);
    let toks = std::fs::read_to_string(toks).unwrap();
    assert!(toks.starts_with("id,index,time_s\n"), "{toks}");
    let req = std::fs::read_to_string(req).unwrap();
    assert!(req.starts_with("id,send_s,first_token_s,last_token_s,prompt_tokens,output_tokens"), "{req}");
    assert_eq!(req.lines().count(), 21);
    let steps = std::fs::read_to_string(steps).unwrap();
    assert!(
        steps.starts_with("start_s,duration_s,batch_size,prefill_tokens,decode_tokens,kv_used_tokens,waiting,running")
    );
}

#[test]
fn sglang_engine_runs_with_its_own_defaults() {
    let out = ok(&["--engine", "sglang", "--num-prompts", "40", "--schedule-policy", "lpm"]);
    assert!(out.contains("Engine:         sglang@0.5 · max_running_requests"), "{out}");
    assert!(out.contains("KV cache:       radix (page 1)"), "{out}");
    assert!(out.contains("Backend:                                 sglang"), "{out}");
    assert!(out.contains("Successful requests:                     40"), "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["--engine", "sglang", "--json", "--mem-fraction-static", "0.8"])).unwrap();
    assert_eq!(v["config"]["mem_fraction_static"], 0.8);
    assert!(fails(&["--engine", "sglang", "--mem-fraction-static", "1.5"]).contains("--mem-fraction-static"));
}

#[test]
fn run_draws_its_svg() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("run.svg");
    ok(&["--num-prompts", "30", "--plot", svg.to_str().unwrap()]);
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.starts_with("<svg") && drawn.contains("TTFT distribution") && drawn.contains("Queues"));
    assert!(fails(&["--plot", "run.jpg"]).contains("name an .svg or .png file"));
    // PNG: the same figure, rasterised with the compiled-in font.
    let png = dir.path().join("run.png");
    ok(&["--num-prompts", "30", "--plot", png.to_str().unwrap()]);
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "a PNG file");
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes)).read_info().unwrap();
    assert_eq!((reader.info().width, reader.info().height), (1200, 800));
    let mut rgb = vec![0; reader.output_buffer_size().unwrap()];
    reader.next_frame(&mut rgb).unwrap();
    let px: Vec<&[u8]> = rgb.chunks(3).collect();
    let white = px.iter().filter(|p| p.iter().all(|&c| c == 255)).count();
    let dark = px.iter().filter(|p| p.iter().all(|&c| c < 80)).count();
    assert!(white > px.len() / 2 && dark > 2_000, "a white figure with dark text and axes: {white} white, {dark} dark");
    let blue = px.iter().filter(|p| p[2] > 200 && p[0] < 60 && p[1] < 60).count();
    assert!(blue > 500, "the CDF lines are drawn: {blue} blue pixels");
}

#[test]
fn lightllm_engine_runs() {
    let out = ok(&["--engine", "lightllm", "--num-prompts", "40", "--report-style", "vllm"]);
    assert!(
        out.contains("Engine:         lightllm@main-2025-07 · running_max_req_size 1000 · batch_max_tokens 8448"),
        "{out}"
    );
    assert!(out.contains("KV cache:       token"), "{out}");
    assert!(out.contains("Successful requests:                     40"), "{out}");
}

#[test]
fn engine_switches_named_as_the_engines_name_them() {
    let out = ok(&["--engine", "vllm-v0", "--enable-chunked-prefill", "--num-prompts", "20"]);
    assert!(out.contains("chunked prefill, decodes first · 1% block watermark"), "{out}");
    assert!(out.contains("Successful requests:                     20"), "{out}");
    let out = ok(&["--engine", "vllm-v0", "--num-prompts", "5"]);
    assert!(out.contains("prefills first, no chunked prefill"), "{out}");
    assert!(ok(&["--num-prompts", "5"]).contains("async scheduling on"));
    assert!(ok(&["--num-prompts", "5", "--no-async-scheduling"]).contains("async scheduling off"));
    let out = ok(&["--engine", "sglang", "--num-prompts", "5", "--disable-overlap-schedule"]);
    assert!(out.contains("overlap schedule off"), "{out}");
    assert!(fails(&["--engine", "sglang", "--enable-chunked-prefill"]).contains("--chunked-prefill-size"));
    assert!(fails(&["--engine", "lightllm", "--async-scheduling"]).contains("only vLLM v1 and SGLang"));
    assert!(fails(&["--enable-chunked-prefill", "--no-enable-chunked-prefill"]).contains("cannot be used with"));
    let out = ok(&["--engine", "vllm-v0", "--num-scheduler-steps", "10", "--num-prompts", "20"]);
    assert!(out.contains("1% block watermark · num_scheduler_steps 10 (multi-step)"), "{out}");
    assert!(out.contains("Successful requests:                     20"), "{out}");
    let e = fails(&["--engine", "vllm", "--num-scheduler-steps", "10"]);
    assert!(e.contains("--num-scheduler-steps") && e.contains("--engine vllm-v0"), "{e}");
}

#[test]
fn async_output_processing_is_vllm_v0s_and_echoed() {
    // On by default (vLLM ModelConfig.use_async_output_proc), off by its own flag or under
    // --enforce-eager, speculative decoding or pipeline parallelism.
    let on = ok(&["--engine", "vllm-v0", "--num-scheduler-steps", "10", "--num-prompts", "20"]);
    assert!(on.contains("num_scheduler_steps 10 (multi-step) · async output processing on"), "{on}");
    assert!(on.contains("Successful requests:                     20"), "{on}");
    let args = ["--engine", "vllm-v0", "--num-scheduler-steps", "10", "--num-prompts", "20"];
    let off = ok(&[&args[..], &["--disable-async-output-proc"]].concat());
    assert!(off.contains("(multi-step) · async output processing off"), "{off}");
    assert!(off.contains("Successful requests:                     20"), "{off}");
    assert_ne!(
        on.lines().find(|l| l.contains("TTFT")),
        off.lines().find(|l| l.contains("TTFT")),
        "the flag changes the run"
    );
    let eager = ok(&["--engine", "vllm-v0", "--enforce-eager", "--num-prompts", "5"]);
    assert!(eager.contains("1% block watermark · async output processing off"), "{eager}");
    let e = fails(&["--engine", "vllm", "--disable-async-output-proc"]);
    assert!(e.contains("--disable-async-output-proc") && e.contains("--engine vllm-v0"), "{e}");
    let e = fails(&["--engine", "sglang", "--enforce-eager"]);
    assert!(e.contains("--enforce-eager") && e.contains("--engine vllm-v0"), "{e}");
}

#[test]
fn engine_version_selects_a_bundle_and_names_its_engine() {
    let out = ok(&["--engine-version", "vllm@0.18", "--num-prompts", "20"]);
    assert!(out.contains("Engine:         vllm@0.18 (v1)"), "{out}");
    // The bundle implies its engine when --engine is not given.
    let out = ok(&["--engine-version", "sglang@0.5", "--num-prompts", "20"]);
    assert!(out.contains("Engine:         sglang@0.5 · max_running_requests"), "{out}");
    let out = ok(&["--engine-version", "sglang@0.5.1", "--num-prompts", "20"]);
    assert!(out.contains("Engine:         sglang@0.5.1 · max_running_requests"), "{out}");
    let e = fails(&["--engine", "sglang", "--engine-version", "vllm@0.33"]);
    assert!(e.contains("--engine-version") && e.contains("vllm@0.33 is a bundle of the vllm engine"), "{e}");
    let help = ok(&["run", "--help"]);
    assert!(help.contains("vllm@0.33") && help.contains("sglang@0.5") && help.contains("sglang@0.5.1"), "{help}");
}

#[test]
fn vllm_memory_budget_is_echoed_and_its_flags_reach_it() {
    let out = ok(&["--num-prompts", "4"]);
    let line = "KV memory:      79.22 GiB × 0.92 = 72.88 − weights 14.96 − activation 3.49 − CUDA graphs 0.62 \
                (102 graphs) − non-torch 0.16 = KV 53.66 GiB";
    assert!(out.contains(line), "{out}");
    assert!(out.contains("27,474 blocks of 16"), "{out}");
    // The user's utilization and terms replace the bundle's and the model's:
    // 85,061,827,297 × 0.9 → 76,555,644,568 − 16,060,000,000 − 1 GiB − 0 − 0.5 GiB = 58,885,031,832
    // bytes = 28,078 blocks of 2 MiB.
    let out = ok(&[
        "--num-prompts",
        "4",
        "--gpu-memory-utilization",
        "0.9",
        "--activation-peak-gib",
        "1",
        "--cudagraph-memory-gib",
        "0",
        "--non-torch-memory-gib",
        "0.5",
    ]);
    assert!(out.contains("activation 1.00 (set) − CUDA graphs 0.00 (set) − non-torch 0.50 (set)"), "{out}");
    assert!(out.contains("28,078 blocks of 16"), "{out}");
    let out = ok(&["--num-prompts", "4", "--engine-version", "vllm@0.18"]);
    assert!(out.contains("gpu_memory_utilization 0.9\n"), "{out}");
    // 1 GiB holds 512 blocks (8,176 tokens past the null block): one longest sequence must fit.
    let out = ok(&["--num-prompts", "4", "--kv-cache-memory-bytes", "1073741824", "--max-model-len", "8176"]);
    assert!(out.contains("(512 blocks of 16"), "{out}");
}

/// `cachesim list`: the catalog and the bundles a flag takes, as a table or JSON.
#[test]
fn list_prints_the_catalog() {
    let gpus = ok(&["list", "gpus"]);
    assert!(gpus.starts_with("name "), "{gpus}");
    assert!(gpus.lines().any(|l| l.starts_with("h200 ") && l.contains("Hopper") && l.contains("4800")), "{gpus}");
    let json: serde_json::Value = serde_json::from_str(&ok(&["list", "models", "--json"])).unwrap();
    let names: Vec<&str> = json.as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"llama-3.1-8b") && names.contains(&"deepseek-r1"), "{names:?}");
    let engines = ok(&["list", "engines"]);
    for v in cachesim::engine::EngineVersion::ALL {
        assert!(engines.lines().any(|l| l.starts_with(&format!("{} ", v.name()))), "{} missing:\n{engines}", v.name());
    }
    let profiles = ok(&["list", "profiles"]);
    assert!(profiles.contains("a100-80gb-sglang") && profiles.contains("leave-one-out median |error|"), "{profiles}");
    assert!(ok(&["list", "networks"]).contains("ib-8x400"));
    let err = fails(&["list", "cpus"]);
    assert!(err.contains("invalid value 'cpus'"), "{err}");
}

/// SGLang's priority scheduling through the binary: the engine line and the per-class heading
/// say which values go first; the important class waits less under load and the other is
/// preempted; the same bytes at any thread count; without the flag SGLang ignores the
/// priorities and says so.
#[test]
fn sglang_priority_scheduling_serves_the_important_class_first() {
    let base = [
        "--engine",
        "sglang",
        "--priority-mix",
        "0:0.3,20:0.7",
        "--request-rate",
        "20",
        "--max-running-requests",
        "16",
    ];
    let with: Vec<&str> = base.iter().copied().chain(["--enable-priority-scheduling"]).collect();
    let text = ok(&with);
    assert!(text.contains("priority scheduling (high values first, preemption above a difference of 10)"), "{text}");
    assert!(text.contains("Per priority class (higher is served first under --enable-priority-scheduling)"), "{text}");
    let json_args: Vec<&str> = with.iter().copied().chain(["--json"]).collect();
    let v: serde_json::Value = serde_json::from_str(&ok(&json_args)).unwrap();
    let classes = v["priority_classes"].as_array().expect("per-class rows");
    let p99 = |p: i64| classes.iter().find(|c| c["priority"] == p).unwrap()["p99_ttft_ms"].as_f64().unwrap();
    assert!(p99(20) * 3.0 < p99(0), "class 20's P99 TTFT {} against class 0's {}", p99(20), p99(0));
    assert_eq!(ok_at_threads(&json_args, "1"), ok_at_threads(&json_args, "2"));
    let plain = cachesim(&base);
    assert!(plain.status.success());
    let err = String::from_utf8_lossy(&plain.stderr);
    assert!(err.contains("SGLang keeps and ignores them without --enable-priority-scheduling"), "{err}");
}
