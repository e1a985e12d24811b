//! The TensorRT-LLM bundle's rules on hand-computed schedules, through the library: admission
//! reserving every request's blocks to completion (GUARANTEED_NO_EVICT) against vLLM 0.33's
//! admission of the known tokens, and whole prompts under `max_num_tokens` and
//! `max_batch_size` without chunking.

use cachesim::cache::{CacheSpec, Policy};
use cachesim::cost::Affine;
use cachesim::engine::{EngineConfig, EngineVersion};
use cachesim::sim::{self, Keep, SimConfig, SimResult};
use cachesim::workload::Workload;
use std::path::Path;

const COST: Affine = Affine { base_s: 0.01, per_prefill_token_s: 1e-5, per_decode_seq_s: 1e-4, per_ctx_token_s: 0.0 };

use crate::common;

/// Requests with distinct tokens: (prompt length, output length).
fn workload(reqs: &[(u32, u32)]) -> Workload {
    common::distinct_requests(reqs)
}

fn run(version: EngineVersion, w: &Workload, seqs: u32, tokens: u32, capacity_tokens: u64) -> SimResult {
    let cfg = SimConfig {
        engine: EngineConfig { max_num_seqs: seqs, max_num_batched_tokens: tokens, ..EngineConfig::new(version) },
        cache: CacheSpec {
            policy: Policy::Paged,
            block_size: Some(16),
            page_size: None,
            capacity_tokens: Some(capacity_tokens),
            hybrid: None,
            sglang_pool: None,
        },
        max_concurrency: None,
        request_overhead_s: 0.0,
        limits: None,
    };
    let sends: Vec<(u32, f64)> = (0..w.requests.len() as u32).map(|i| (i, 0.0)).collect();
    sim::run(w, &sends, &cfg, &COST, Keep { schedule: true, ..Keep::default() })
}

fn items(r: &SimResult, step: usize) -> Vec<(u32, u32, u32)> {
    r.schedule[step].items.clone()
}

/// Two requests of 32 prompt tokens and 64 outputs in 10 blocks of 16 tokens. Each needs
/// ⌈(32 + 64) / 16⌉ = 6 blocks to complete. TensorRT-LLM admits the first (6 of 10 reserved)
/// and not the second (6 > 4 left): the second starts only once the first has finished — its
/// prefill in step 1, its 63 other tokens in steps 2–64, the second's prefill in step 65 — and
/// nothing is ever preempted. vLLM 0.33 reserves the 2 blocks of the known prompt, admits both,
/// and preempts the second when their growth fills the 10 blocks (5 blocks = 80 tokens each, at
/// the 49th output).
#[test]
fn admission_reserves_to_completion_and_never_preempts() {
    let w = workload(&[(32, 64), (32, 64)]);
    let trt = run(EngineVersion::Trtllm10, &w, 256, 8192, 160);
    assert_eq!(items(&trt, 0), vec![(0, 32, 0)]);
    assert_eq!(trt.schedule[0].usage_after_schedule.used_tokens, 96, "the whole reservation is taken");
    assert_eq!(items(&trt, 63), vec![(0, 1, 94)]);
    assert_eq!(trt.schedule[63].finished, vec![0]);
    assert_eq!(items(&trt, 64), vec![(1, 32, 0)]);
    assert!(trt.schedule.iter().all(|s| s.preempted.is_empty()));
    assert_eq!(trt.schedule.len(), 128);

    let vllm = run(EngineVersion::Vllm033, &w, 256, 8192, 160);
    assert_eq!(items(&vllm, 0), vec![(0, 32, 0), (1, 32, 0)]);
    let first = vllm.schedule.iter().position(|s| !s.preempted.is_empty()).unwrap();
    assert_eq!((first, vllm.schedule[first].preempted.clone()), (49, vec![1]));
}

/// Without chunking a prompt is scheduled whole, after the generation requests, while the step's
/// tokens stay within `max_num_tokens` (100): three prompts of 60 run one a step, each beside the
/// decode of the one before.
#[test]
fn whole_prompts_under_max_num_tokens() {
    let w = workload(&[(60, 2), (60, 2), (60, 2)]);
    let trt = run(EngineVersion::Trtllm10, &w, 256, 100, 16_000);
    assert_eq!(items(&trt, 0), vec![(0, 60, 0)]);
    assert_eq!(items(&trt, 1), vec![(0, 1, 60), (1, 60, 0)]);
    assert_eq!(items(&trt, 2), vec![(1, 1, 60), (2, 60, 0)]);
    assert_eq!(items(&trt, 3), vec![(2, 1, 60)]);
    assert_eq!(trt.schedule.len(), 4);
}

/// `max_batch_size` (2) bounds the requests in flight: the third waits for a finished one.
#[test]
fn max_batch_size_bounds_the_batch() {
    let w = workload(&[(16, 3), (16, 3), (16, 3)]);
    let trt = run(EngineVersion::Trtllm10, &w, 2, 8192, 16_000);
    assert_eq!(items(&trt, 0), vec![(0, 16, 0), (1, 16, 0)]);
    assert_eq!(items(&trt, 2), vec![(0, 1, 17), (1, 1, 17)]);
    assert_eq!(trt.schedule[2].finished, vec![0, 1]);
    assert_eq!(items(&trt, 3), vec![(2, 16, 0)]);
}

/// Every TensorRT-LLM case runs with the `max_batch_size` / `max_num_tokens` that trtllm-bench
/// would derive for it ([`cachesim::engine::trtllm::bench_settings`]), its GPU, model and TP, at
/// the fraction and KV dtype it states, with FP8 weights and chunking off.
#[test]
fn trtllm_cases_run_trtllm_bench_settings() {
    use cachesim::engine::trtllm::{bench_settings, BenchInput};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration/cases");
    let cases = cachesim::calibrate::case::load_dir(&dir).unwrap();
    let mut n = 0;
    for c in cases.iter().filter(|c| c.case.deployment.engine_version.as_deref() == Some("trtllm@1.0")) {
        let d = &c.case.deployment;
        let flag = |name: &str| -> String {
            let i = d.flags.iter().position(|f| f == name).unwrap_or_else(|| panic!("{}: no {name}", c.case.case));
            d.flags[i + 1].clone()
        };
        let w = &c.case.workload;
        let (isl, osl) = (w.input_len.unwrap(), w.output_len.unwrap());
        let gpu = cachesim::catalog::gpu(&d.gpu, None).unwrap();
        let model = cachesim::catalog::model(&d.model, None).unwrap();
        let input = BenchInput {
            avg_isl: isl as f64,
            avg_osl: osl as f64,
            max_isl: isl,
            tp: flag("--tp").parse().unwrap(),
            pp: 1,
            kv_fraction: flag("--kv-cache-free-gpu-mem-fraction").parse().unwrap(),
            weight_bytes: 1.0,
            kv_bytes: if flag("--kv-cache-dtype") == "fp8" { 1.0 } else { 2.0 },
            chunked: false,
        };
        let want = bench_settings(&gpu, &model, input);
        let got: (u32, u32) =
            (flag("--max-num-seqs").parse().unwrap(), flag("--max-num-batched-tokens").parse().unwrap());
        assert_eq!(got, want, "{}", c.case.case);
        assert!(c.case.expressible && w.dataset == "random" && w.range_ratio == 1.0, "{}", c.case.case);
        n += 1;
    }
    assert_eq!(n, 60, "P049–P108");
}
