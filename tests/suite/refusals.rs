//! Requests and configurations the real engines would not serve, through the binary: each
//! engine's frontend verdicts on a hand-made trace, start-up refusals with the engines' own
//! messages and a non-zero exit, "All requests failed", and the saturation diagnosis present on
//! an overloaded run and absent below saturation. docs/reference/refusals.md lists the same cases.

use crate::common;

use common::{cachesim, ok};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Runs the binary: (exit code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let out = cachesim(args);
    let text = |b: Vec<u8>| String::from_utf8(b).expect("utf-8");
    (out.status.code().unwrap_or(-1), text(out.stdout), text(out.stderr))
}

/// A native trace of (prompt length, output length) requests with distinct tokens.
fn trace(dir: &Path, reqs: &[(u32, u32)]) -> PathBuf {
    let path = dir.join("t.jsonl");
    let mut doc = String::new();
    for (i, &(p, o)) in reqs.iter().enumerate() {
        let ids: Vec<u32> = (0..p).map(|k| 1000 * i as u32 + k).collect();
        doc.push_str(&serde_json::json!({"prompt_ids": ids, "output_len": o}).to_string());
        doc.push('\n');
    }
    std::fs::write(&path, doc).unwrap();
    path
}

/// Four requests against --max-model-len 100: (10, 5), (90, 10), (95, 10), (5, 0).
const FOUR: [(u32, u32); 4] = [(10, 5), (90, 10), (95, 10), (5, 0)];

/// (engine, completed, failures by reason, outputs cut, generated tokens).
type Case = (&'static str, u64, &'static [(&'static str, u64)], u64, u64);

fn json(args: &[&str]) -> (Value, String) {
    let (code, out, err) = run(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    (serde_json::from_str(&out).unwrap(), err)
}

#[test]
fn each_engine_rejects_and_cuts_as_its_frontend_does() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path(), &FOUR);
    let t = t.to_str().unwrap();
    // (engine, completed, failed reasons, outputs cut, generated tokens)
    let cases: [Case; 4] = [
        // prompt + output ≤ 100 served; 95 + 10 rejected; max_tokens 0 rejected.
        ("vllm", 2, &[("zero_max_tokens", 1), ("context_length", 1)], 0, 15),
        ("vllm-v0", 2, &[("zero_max_tokens", 1), ("context_length", 1)], 0, 15),
        // SGLang rejects input + output ≥ 100 (so 90 + 10 too) and serves 0 outputs.
        ("sglang", 2, &[("context_length", 2)], 0, 5),
        // LightLLM cuts 95 + 10 to 95 + 5 and rejects max_new_tokens 0.
        ("lightllm", 3, &[("zero_max_tokens", 1)], 1, 5 + 10 + 5),
    ];
    for (engine, completed, reasons, cut, generated) in cases {
        let (v, err) = json(&["--trace", t, "--engine", engine, "--max-model-len", "100", "--json"]);
        let failed: u64 = reasons.iter().map(|r| r.1).sum();
        assert_eq!(v["completed"], completed, "{engine}");
        assert_eq!(v["failed"], failed, "{engine}");
        assert_eq!(v["failed_reasons"].as_object().unwrap().len(), reasons.len(), "{engine}");
        for (k, n) in reasons {
            assert_eq!(v["failed_reasons"][k], *n, "{engine} {k}");
        }
        assert_eq!(v["outputs_cut"], cut, "{engine}");
        assert_eq!(v["total_output_tokens"], generated, "{engine}");
        assert!(err.starts_with(&format!("{failed} of 4 requests failed: ")), "{engine}: {err}");
    }
}

#[test]
fn the_engines_messages_reach_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path(), &FOUR);
    let t = t.to_str().unwrap();
    let (_, _, err) = run(&["--trace", t, "--max-model-len", "100"]);
    assert_eq!(
        err,
        "2 of 4 requests failed: 1 max_tokens below 1, 1 longer than the model length\n  \
         max_tokens below 1: max_tokens must be at least 1, got 0.\n  \
         longer than the model length: You passed 95 input tokens and requested 10 output tokens. However, \
         the model's context length is only 100 tokens, resulting in a maximum input length of 90 tokens. \
         Please reduce the length of the input prompt.\n"
    );
    let (_, _, err) = run(&["--trace", t, "--engine", "sglang", "--max-model-len", "100"]);
    assert!(
        err.contains(
            "longer than the model length: Requested token count exceeds the model's maximum context length of \
             100 tokens. You requested a total of 100 tokens: 90 tokens from the input messages and 10 tokens for \
             the completion."
        ),
        "{err}"
    );
    let (_, _, err) = run(&["--trace", t, "--engine", "lightllm", "--max-model-len", "100"]);
    assert!(err.contains("max_new_tokens must be at least 1, got 0."), "{err}");
    assert!(err.contains("1 of 4 requests had their output cut to fit (5 tokens fewer)"), "{err}");
    // vLLM's layout counts them; SGLang's has no such row (ENGINE_SPEC §7.3).
    let (_, out, _) = run(&["--trace", t, "--max-model-len", "100", "--report-style", "vllm"]);
    assert!(
        out.contains("Successful requests:                     2         \nFailed requests:                         2")
    );
    let (_, out, _) = run(&["--trace", t, "--max-model-len", "100"]);
    assert!(!out.contains("Failed requests"), "{out}");
}

#[test]
fn when_every_request_fails_the_run_says_so_and_exits_non_zero() {
    // The sample's prompts are hundreds of tokens: nothing fits 10.
    let (code, out, err) = run(&["--max-model-len", "10"]);
    assert_eq!(code, 1);
    assert!(out.contains("Successful requests:                     0 "), "{out}");
    assert!(err.starts_with("160 of 160 requests failed: 160 longer than the model length\n"), "{err}");
    assert!(
        err.ends_with(
            "error: All requests failed. This is likely due to a misconfiguration on the benchmark arguments.\n"
        ),
        "{err}"
    );
    // SGLang starting with a 10-token pool: max_req_input_len 4, every prompt is rejected.
    let (code, _, err) = run(&["--engine", "sglang", "--max-total-tokens", "10"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("160 of 160 requests failed: 160 prompt longer than the KV pool allows\n"), "{err}");
    assert!(err.contains(
        "exceeds the maximum allowed length (4 tokens). Use a shorter input or enable --allow-auto-truncate."
    ));
}

#[test]
fn engines_that_would_not_start_are_refused_with_their_message() {
    // Llama 3.2 11B on a V100: the KV cache holds 66,688 tokens of 131,072 bytes, not one
    // 131,072-token sequence. The capacity comes from a run that fits.
    let (v, _) = json(&["--gpu", "v100", "--model", "llama-3.2-11b", "--max-model-len", "4096", "--json"]);
    let (cap, bytes) =
        (v["config"]["kv_capacity_tokens"].as_u64().unwrap(), v["config"]["kv_bytes_per_token"].as_u64().unwrap());
    assert_eq!((cap, bytes), (66_688, 131_072));
    let gib = |t: u64| format!("{:.2}", (t * bytes) as f64 / (1u64 << 30) as f64);
    let (code, out, err) = run(&["--gpu", "v100", "--model", "llama-3.2-11b"]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        format!(
            "error: vllm would not start: To serve at least one request with the models's max seq len (131072), \
             ({} GiB KV cache is needed, which is larger than the available KV cache memory ({} GiB). Based on the \
             available memory, the estimated maximum model length is 66688. Try increasing `gpu_memory_utilization` \
             or decreasing `max_model_len` when initializing the engine. (cachesim: pass --max-model-len 66688.)\n",
            gib(131_072),
            gib(cap)
        )
    );
    // The estimate is the answer: one token more is refused again.
    assert_eq!(run(&["--gpu", "v100", "--model", "llama-3.2-11b", "--max-model-len", "66688"]).0, 0);
    assert_eq!(run(&["--gpu", "v100", "--model", "llama-3.2-11b", "--max-model-len", "66689"]).0, 1);

    // vLLM starts with any block override (it checks memory before applying it): the run goes
    // ahead with a note, and requests that can never fit fail (here all of them).
    let (code, _, err) = run(&["--num-gpu-blocks-override", "10"]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with(
            "note: max_model_len 131072 needs 8192 blocks of 16 tokens but --num-gpu-blocks-override 10 leaves 9 \
             (one is the null block); vLLM starts anyway (it checks memory before applying the override), and a \
             request that can never fit fails\n160 of 160 requests failed: 160 never fits the KV cache\n"
        ),
        "{err}"
    );
    assert!(err.ends_with(
        "error: All requests failed. This is likely due to a misconfiguration on the benchmark arguments.\n"
    ));
    for engine_args in [
        &["--engine", "vllm-v0", "--max-num-batched-tokens", "64"][..],
        &["--no-enable-chunked-prefill", "--max-num-batched-tokens", "64"],
    ] {
        let (code, _, err) = run(engine_args);
        assert_eq!(code, 1, "{engine_args:?}");
        assert!(
            err.contains(
                "would not start: max_num_batched_tokens (64) is smaller than max_model_len (131072). This \
                 effectively limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject \
                 longer sequences. Please increase max_num_batched_tokens or decrease max_model_len.\n"
            ),
            "{err}"
        );
    }
    let (code, _, err) = run(&["--max-model-len", "200000"]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with(
            "error: vllm would not start: User-specified max_model_len (200000) is greater than the derived \
             max_model_len (max_position_embeddings=131072 or model_max_length=None in model's config.json)."
        ),
        "{err}"
    );
    let (code, _, err) = run(&["--engine", "sglang", "--max-model-len", "200000"]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with(
            "error: sglang would not start: Warning: User-specified context_length (200000) is greater than the \
             derived context_length (131072)."
        ),
        "{err}"
    );
    let (code, _, err) = run(&["--engine", "sglang", "--max-total-tokens", "6"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("error: sglang would not start: Memory pool size is too small"), "{err}");
}

/// The shape check of docs/guide/run.md: 50 requests of 200 + 100 tokens at 20 req/s on a V100, raw roofline
/// (the built-in V100 profile is fitted on another workload and engine setup).
fn shape_check(dir: &Path, seqs: &str, tokens: &str) -> (String, Value) {
    let t = common::random_50x200x100(dir);
    let t = t.to_str().unwrap();
    let args = [
        "--trace",
        t,
        "--request-rate",
        "20",
        "--gpu",
        "v100",
        "--model",
        "llama-3.2-11b",
        "--max-model-len",
        "4096",
        "--max-num-seqs",
        seqs,
        "--max-num-batched-tokens",
        tokens,
        "--calibration",
        "none",
    ];
    let text = ok(&args);
    let mut with_json = args.to_vec();
    with_json.push("--json");
    (text, serde_json::from_str(&ok(&with_json)).unwrap())
}

#[test]
fn an_overloaded_run_is_diagnosed_and_an_unloaded_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let (text, v) = shape_check(dir.path(), "16", "2048");
    let s = &v["saturation"];
    let kinds: Vec<&str> = s["signals"].as_array().unwrap().iter().map(|x| x["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["queue_growing"]);
    // The estimate is the run's completed-request throughput; 80% of it, two digits, to rerun with.
    let rate = v["request_throughput"].as_f64().unwrap();
    assert_eq!(s["sustainable_rate_rps"].as_f64().unwrap(), rate);
    let suggested = s["suggested_request_rate"].as_f64().unwrap();
    assert!((suggested - 0.8 * rate).abs() <= 0.05 * rate, "{suggested} vs {rate}");
    assert!(text.contains("Saturated:      this run measured an overloaded server"), "{text}");
    assert!(text.contains(&format!("rerun with --request-rate {suggested} ")), "{text}");
    assert!(text.contains("`cachesim cache --trace "), "{text}");
    // Rerun at the suggested rate: no longer saturated.
    let t = dir.path().join("r50.jsonl");
    let t = t.to_str().unwrap();
    let r = suggested.to_string();
    let again = ok(&[
        "--trace",
        t,
        "--request-rate",
        &r,
        "--gpu",
        "v100",
        "--model",
        "llama-3.2-11b",
        "--max-model-len",
        "4096",
        "--max-num-seqs",
        "16",
        "--max-num-batched-tokens",
        "2048",
        "--calibration",
        "none",
        "--json",
    ]);
    assert_eq!(serde_json::from_str::<Value>(&again).unwrap()["saturation"], Value::Null);

    let (text, v) = shape_check(dir.path(), "64", "6144");
    assert_eq!(v["saturation"], Value::Null);
    assert!(!text.contains("Saturated"), "{text}");
}

#[test]
fn the_hit_rate_is_in_the_report_and_the_header_counts_what_was_sent() {
    let (v, _) = json(&["--json"]);
    let ratio = v["cached_prompt_tokens"].as_f64().unwrap() / v["total_input_tokens"].as_f64().unwrap();
    assert_eq!(v["hit_ratio"].as_f64().unwrap(), ratio);
    let out = ok(&[]);
    assert!(out.contains(&format!("Prefix cache hit rate (%):               {:<10.2}\n", ratio * 100.0)), "{out}");
    let out = ok(&["--num-prompts", "20", "--request-rate", "5"]);
    assert!(out.contains("Requests:       20 of 160 requests from 160 records"), "{out}");
    let (v, _) = json(&["--num-prompts", "20", "--json"]);
    assert_eq!(v["requests_sent"], 20);
}

#[test]
fn failed_turns_do_not_stall_their_sessions() {
    // The sample's 40 sessions grow turn by turn: a model length between the shortest and the
    // longest request fails the later turns; every request still ends, served or failed, and a
    // session's turns after a failed one are still sent.
    // (model length, engine, completed, failed, outputs cut); LightLLM cuts where the others fail.
    let cases = [
        ("600", "vllm", 40, 120, 0),
        ("600", "sglang", 40, 120, 0),
        ("600", "lightllm", 71, 89, 31),
        ("1000", "vllm", 150, 10, 0),
        ("1000", "lightllm", 160, 0, 10),
        ("1200", "vllm", 160, 0, 0),
    ];
    // vLLM's count, independently: requests of an unconstrained run with prompt + output > L.
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("req.csv");
    ok(&["--requests-csv", csv.to_str().unwrap()]);
    let text = std::fs::read_to_string(&csv).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (p, o) = (col("prompt_tokens"), col("output_tokens"));
    let over = |len: u64| {
        text.lines()
            .skip(1)
            .filter(|l| {
                let f: Vec<u64> = l.split(',').map(|x| x.parse().unwrap_or(0)).collect();
                f[p] + f[o] > len
            })
            .count() as u64
    };
    assert_eq!((over(600), over(1000), over(1200)), (120, 10, 0));
    for (len, engine, done, failed, cut) in cases {
        let (v, _) = json(&["--engine", engine, "--max-model-len", len, "--json"]);
        let got = (v["completed"].as_u64().unwrap(), v["failed"].as_u64().unwrap(), v["outputs_cut"].as_u64().unwrap());
        assert_eq!(got, (done, failed, cut), "{engine} {len}");
    }
}

/// SGLang's `--max-queued-requests`: under a burst the arrivals that find the queue full fail
/// as `queue_full` with SGLang's message; under priority scheduling some waiting requests are
/// aborted for more important ones (`priority_abort`), and the important class completes more.
/// Every request is counted once.
#[test]
fn a_bounded_sglang_queue_refuses_what_does_not_fit() {
    let base = ["--engine", "sglang", "--max-queued-requests", "4", "--max-running-requests", "4"];
    let json = |extra: &[&str]| -> Value {
        let args: Vec<&str> = base.iter().chain(extra).copied().chain(["--json"]).collect();
        serde_json::from_str(&ok(&args)).unwrap()
    };
    let plain = json(&["--request-rate", "40"]);
    let (completed, failed) = (plain["completed"].as_u64().unwrap(), plain["failed"].as_u64().unwrap());
    assert_eq!(completed + failed, 160);
    assert_eq!(plain["failed_reasons"]["queue_full"].as_u64(), Some(failed), "{plain}");
    let (_, _, err) = run(&[&base[..], &["--request-rate", "40"]].concat());
    assert!(err.contains("the waiting queue was full: The request queue is full."), "{err}");
    // A lighter load, so that both classes complete some.
    let prio = json(&["--priority-mix", "0:0.5,20:0.5", "--enable-priority-scheduling", "--request-rate", "10"]);
    assert!(prio["failed_reasons"]["priority_abort"].as_u64().unwrap() > 0, "{prio}");
    let classes = prio["priority_classes"].as_array().unwrap();
    let done = |p: i64| classes.iter().find(|c| c["priority"] == p).unwrap()["completed"].as_u64().unwrap();
    assert!(done(20) > 3 * done(0), "{prio}");
}
