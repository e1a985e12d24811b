//! The vLLM bundles' rules on hand-computed scenarios, through the library: whole-sequence
//! admission (vLLM 0.19+, `scheduler_reserve_full_isl`) against first-chunk admission (0.18),
//! with and without prefix caching, and 0.33's uncapped chunks for a request that is alone.

use cachesim::cache::{CacheSpec, Policy};
use cachesim::cost::Affine;
use cachesim::engine::{EngineConfig, EngineVersion};
use cachesim::sim::{self, Keep, SimConfig};
use cachesim::workload::Workload;

const COST: Affine = Affine { base_s: 0.01, per_prefill_token_s: 1e-5, per_decode_seq_s: 1e-4, per_ctx_token_s: 0.0 };

use crate::common;

/// Requests with distinct tokens: (prompt length, output length).
fn workload(reqs: &[(u32, u32)]) -> Workload {
    common::distinct_requests(reqs)
}

fn cfg(version: EngineVersion, policy: Policy, capacity_tokens: u64, budget: u32, threshold: u32) -> SimConfig {
    SimConfig {
        engine: EngineConfig {
            max_num_batched_tokens: budget,
            long_prefill_token_threshold: threshold,
            ..EngineConfig::new(version)
        },
        cache: CacheSpec {
            policy,
            block_size: Some(16),
            page_size: None,
            capacity_tokens: Some(capacity_tokens),
            hybrid: None,
            sglang_pool: None,
        },
        max_concurrency: None,
        request_overhead_s: 0.0,
        limits: None,
    }
}

fn preemptions(r: &sim::SimResult) -> u32 {
    r.records.iter().map(|x| x.preemptions).sum()
}

/// A 40k-token prompt arrives with a 30k-token one in a 64k-token cache (`num_gpu_blocks` 4096
/// at block 16: 4095 usable blocks, 65,520 tokens), 8192 tokens per step, 512 outputs each.
/// vLLM 0.18 admits the 40k prompt with its first 2768 tokens in the step where the 30k prompt
/// finishes its prefill; it fills the cache in three more steps and is preempted. With prefix
/// caching its computed blocks stay cached: resuming would need them all back plus a chunk, which
/// the decoding 30k request never leaves room for, so it waits — one preemption. Without prefix
/// caching it is readmitted after every preemption and refills the cache from nothing: 102. vLLM
/// 0.33 never admits it beside the 30k request (2500 blocks needed, 2220 free): none.
#[test]
fn a_40k_prompt_beside_a_running_30k_prompt_in_a_64k_cache() {
    let w = workload(&[(30_000, 512), (40_000, 512)]);
    let sends = [(0, 0.0), (1, 0.0)];
    let capacity = 4095 * 16;
    let run =
        |v, p| sim::run(&w, &sends, &cfg(v, p, capacity, 8192, 0), &COST, Keep { schedule: true, ..Keep::default() });
    let old_paged = run(EngineVersion::Vllm018, Policy::Paged);
    let old_none = run(EngineVersion::Vllm018, Policy::None);
    let new_paged = run(EngineVersion::Vllm033, Policy::Paged);
    let new_none = run(EngineVersion::Vllm033, Policy::None);
    assert_eq!(preemptions(&old_paged), 1);
    assert_eq!(preemptions(&old_none), 102);
    assert_eq!(preemptions(&new_paged), 0);
    assert_eq!(preemptions(&new_none), 0);
    // 0.18: the second request starts in the 30k prompt's last chunk (30000 − 3 × 8192 = 5424).
    assert_eq!(old_paged.schedule[3].items, vec![(0, 5424, 24576), (1, 2768, 0)]);
    // 0.33: it waits for the first to finish (its 512th token, at step 514), then runs alone.
    let first_step_of_1 = new_paged.schedule.iter().position(|s| s.items.iter().any(|x| x.0 == 1)).unwrap();
    let finish_of_0 = new_paged.schedule.iter().position(|s| s.finished.contains(&0)).unwrap();
    assert_eq!((finish_of_0, first_step_of_1), (514, 515));
    assert!(new_paged.schedule.iter().all(|s| s.preempted.is_empty()));
}

/// vLLM 0.33 does not apply `long_prefill_token_threshold` in a step that begins with a single
/// request running or waiting; 0.18 always does.
#[test]
fn the_long_prefill_threshold_spares_a_request_that_is_alone_in_0_33() {
    let w = workload(&[(5_000, 2), (3_000, 2)]);
    let chunks = |v, sends: &[(u32, f64)]| {
        let r = sim::run(
            &w,
            sends,
            &cfg(v, Policy::Paged, 1 << 20, 4096, 1000),
            &COST,
            Keep { schedule: true, ..Keep::default() },
        );
        r.schedule.iter().map(|s| s.items.iter().map(|x| x.1).collect::<Vec<u32>>()).collect::<Vec<_>>()
    };
    // One request: 0.33 schedules 4096 then 904; 0.18 caps every chunk at 1000.
    let alone = [(0, 0.0)];
    assert_eq!(chunks(EngineVersion::Vllm033, &alone)[..3], [vec![4096], vec![904], vec![1]]);
    let capped: Vec<Vec<u32>> = [1000, 1000, 1000, 1000, 1000, 1].iter().map(|&n| vec![n]).collect();
    assert_eq!(chunks(EngineVersion::Vllm018, &alone)[..6], capped[..]);
    // Two requests waiting: both capped, in both bundles.
    let both = [(0, 0.0), (1, 0.0)];
    for v in [EngineVersion::Vllm033, EngineVersion::Vllm018] {
        assert_eq!(chunks(v, &both)[0], vec![1000, 1000], "{v}");
    }
    // The second arrives after the first step: the first step was uncapped in 0.33 only.
    let later = [(0, 0.0), (1, 0.001)];
    assert_eq!(chunks(EngineVersion::Vllm033, &later)[..2], [vec![4096], vec![904, 1000]]);
    assert_eq!(chunks(EngineVersion::Vllm018, &later)[..2], [vec![1000], vec![1000, 1000]]);
}
