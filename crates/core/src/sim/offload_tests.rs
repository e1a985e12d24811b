//! Hand-computed scenarios of vLLM 0.33's CPU KV offloading (`engine::vllm_offload`) with the
//! affine step-time model (0.01 s a step, 1 ms a prefill token, 2 ms a decode) and 4-token
//! blocks: a prefix the GPU lost reloaded from the host tier (the request waits for the copy,
//! then computes only its new tokens); the copy submitted after a busy step's forward and seen
//! at the poll ending the next step; a block-aligned prompt whose last chunk is reloaded though
//! the GPU holds it; two requests after one prefix making one load; the tier's capacity.

use super::tests::{cfg, workload, COST};
use super::*;
use crate::engine::vllm_offload::OffloadConfig;

/// The tier: `chunks` chunks of 4 tokens, 1 ms to copy one each way.
pub(super) fn tier(chunks: u64) -> OffloadConfig {
    OffloadConfig {
        backend: crate::engine::vllm_offload::OffloadBackend::Native,
        size_gib: 1.0,
        chunks,
        chunk_tokens: 4,
        block_tokens: 4,
        chunk_bytes_per_rank: 1000,
        link_bytes_per_s: 1e6,
        disk: None,
        remote: None,
    }
}

/// `cfg` with `blocks` GPU blocks (the null block included) and, when `chunks` is set, the tier.
fn offloading(blocks: u64, chunks: Option<u64>) -> SimConfig {
    let mut c = cfg(16, 1000, Some(blocks));
    c.engine.offload = chunks.map(tier);
    c
}

fn rec(r: &SimResult, id: u32) -> RequestRecord {
    *r.records.iter().find(|x| x.id == id).expect("request completed")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// A's 16-token prompt, evicted from 12 GPU blocks by F (48 other tokens), is reloaded for B
/// (A's prompt + 4 tokens).
fn reload() -> (Workload, Vec<(u32, f64)>) {
    let a: Vec<u32> = (0..16).collect();
    let mut b = a.clone();
    b.extend(500..504);
    let w = workload(&[(a, 1), ((100..148).collect(), 1), (b, 2)]);
    (w, vec![(0, 0.0), (1, 0.1), (2, 0.2)])
}

#[test]
fn a_prefix_the_gpu_lost_is_loaded_from_the_host_tier() {
    let (w, sends) = reload();
    // Without the tier: B computes its 20 tokens, 0.01 + 0.020 = 0.030 s to its first token.
    let plain = run(&w, &sends, &offloading(13, None), &COST, Keep::default());
    assert!(close(rec(&plain, 2).ttft_s(), 0.030), "{:?}", rec(&plain, 2));
    assert_eq!(rec(&plain, 2).cached_prompt_tokens, 0);
    assert!(plain.offload.is_none());
    // With it: A's 4 chunks are stored after its step (ready at 0.030), F's 12 after its own.
    // B at 0.2: no GPU hit, 4 chunks in the host tier: 16 tokens loaded by an idle engine, at
    // once, 4 ms; at 0.204 B computes its 4 new tokens (0.014 s): first token at 0.218.
    let r = run(&w, &sends, &offloading(13, Some(32)), &COST, Keep::default());
    let b = rec(&r, 2);
    assert!(close(b.ttft_s(), 0.018), "{b:?}");
    assert!(close(b.latency_s(), 0.030), "{b:?}");
    assert_eq!(b.cached_prompt_tokens, 16, "GPU and host hits count as cached");
    let h = r.offload.expect("the tier's figures");
    assert_eq!((h.host_hit_tokens, h.loads, h.loaded_chunks), (16, 1, 4));
    // Stored: A's 4, F's 12, B's fifth chunk.
    assert_eq!((h.tier.stored_chunks, h.tier.evicted_chunks, h.tier.refused_stores), (17, 0, 0));
    assert!(close(h.load_s, 0.004) && close(h.store_s, 0.017), "{h:?}");
    // A and F are unchanged by the tier.
    for id in [0, 1] {
        assert!(close(rec(&r, id).ttft_s(), rec(&plain, id).ttft_s()));
    }
}

/// A busy engine: the copy starts when the step that admitted the load ends and is seen at the
/// poll ending the step after (vLLM 0.29 on submits loads after the forward is launched).
#[test]
fn a_load_waits_for_the_busy_steps_around_it() {
    let a: Vec<u32> = (0..16).collect();
    let mut b = a.clone();
    b.extend(500..504);
    let w = workload(&[(a, 1), ((100..148).collect(), 1), ((900..904).collect(), 20), (b, 2)]);
    let sends = [(0, 0.0), (1, 0.1), (2, 0.18), (3, 0.2)];
    let r = run(&w, &sends, &offloading(13, Some(32)), &COST, Keep::default());
    // F's step ends at 0.158. C: prefill 0.18–0.194, decodes of 0.012 s from there. B arrives
    // during the decode ending at 0.206; the step formed then (C's decode, to 0.218) admits
    // B's load, which copies 0.218–0.222 and is seen at the poll ending 0.230; B's 4 tokens
    // join C's decode in the step from 0.230 (0.016 s): first token at 0.246.
    let b = rec(&r, 3);
    assert!(close(b.ttft_s(), 0.046), "{b:?}");
    assert_eq!(b.cached_prompt_tokens, 16);
    assert_eq!(r.offload.unwrap().loads, 1);
}

/// vLLM caps the GPU hit one token short of the prompt, the host tier's lookup at the last full
/// chunk: an identical block-aligned prompt reloads its last chunk though the GPU holds it
/// (every release, by its code), and computes one token.
#[test]
fn an_aligned_prompt_reloads_its_last_chunk() {
    let a: Vec<u32> = (0..16).collect();
    let w = workload(&[(a.clone(), 1), (a, 1)]);
    let sends = [(0, 0.0), (1, 0.1)];
    let r = run(&w, &sends, &offloading(13, Some(32)), &COST, Keep::default());
    let h = r.offload.unwrap();
    assert_eq!((h.loads, h.loaded_chunks, h.host_hit_tokens), (1, 1, 4));
    // Loaded at once (1 ms), then one token computed, priced as a decode: 0.01 + 0.002.
    let b = rec(&r, 1);
    assert!(close(b.ttft_s(), 0.013), "{b:?}");
    assert_eq!(b.cached_prompt_tokens, 16);
    let plain = run(&w, &sends, &offloading(13, None), &COST, Keep::default());
    // Without the tier: a hit of 12, 4 tokens computed.
    assert!(close(rec(&plain, 1).ttft_s(), 0.014));
    assert_eq!(rec(&plain, 1).cached_prompt_tokens, 12);
}

/// Two requests on one host-held prefix in one step: the first loads it, the second is passed
/// by while the chunks are being loaded and then finds them on the GPU (one load).
#[test]
fn a_prefix_being_loaded_is_loaded_once() {
    let a: Vec<u32> = (0..16).collect();
    let mut b1 = a.clone();
    b1.extend(500..504);
    let mut b2 = a.clone();
    b2.extend(600..604);
    let w = workload(&[(a, 1), ((100..148).collect(), 1), (b1, 2), (b2, 2)]);
    let sends = [(0, 0.0), (1, 0.1), (2, 0.2), (3, 0.2)];
    let r = run(&w, &sends, &offloading(13, Some(32)), &COST, Keep::default());
    let h = r.offload.unwrap();
    assert_eq!((h.loads, h.host_hit_tokens, h.deferred_lookups), (1, 16, 1));
    // B2 shares B1's landed blocks (a GPU hit of 16) and runs in the same step: 0.01 + 8 ms.
    for id in [2, 3] {
        let x = rec(&r, id);
        assert_eq!(x.cached_prompt_tokens, 16);
        assert!(close(x.ttft_s(), 0.022), "{x:?}");
    }
}

/// A full tier evicts by rank and refuses a store that cannot fit whole; runs conserve
/// requests and repeat exactly.
#[test]
fn a_small_tier_evicts_and_runs_repeat() {
    let (w, sends) = reload();
    // 12 chunks: F's 12 chunks evict A's 4 (finished, ranked below F), so B finds nothing, and
    // its own 5 chunks evict 5 of F's.
    let r = run(&w, &sends, &offloading(13, Some(12)), &COST, Keep::default());
    let h = r.offload.unwrap();
    assert_eq!((h.loads, h.tier.evicted_chunks, h.tier.stored_chunks), (0, 9, 21));
    assert_eq!(rec(&r, 2).cached_prompt_tokens, 0);
    // 8 chunks: F's 12 cannot be placed whole.
    let r = run(&w, &sends, &offloading(13, Some(8)), &COST, Keep::default());
    assert!(r.offload.unwrap().tier.refused_stores >= 1);
    assert_eq!(r.records.len(), 3);
    let again = run(&w, &sends, &offloading(13, Some(8)), &COST, Keep::default());
    assert_eq!(format!("{:?}", r.records), format!("{:?}", again.records));
}

/// The priority policy with a tier (its waiting requests holding KV blocks queue by priority,
/// `engine::VllmQueues::prepend_holding`): the reload scenario with B less important than the
/// others loads and completes as under FCFS, and repeats exactly.
#[test]
fn the_priority_policy_loads_from_the_tier() {
    let (mut w, sends) = reload();
    for (r, p) in w.requests.iter_mut().zip([0, 0, 3]) {
        r.priority = Some(p);
    }
    let mut c = offloading(13, Some(32));
    c.engine.scheduling_policy = crate::engine::SchedulingPolicy::Priority;
    let r = run(&w, &sends, &c, &COST, Keep::default());
    let b = rec(&r, 2);
    assert!(close(b.ttft_s(), 0.018), "{b:?}");
    assert_eq!(b.cached_prompt_tokens, 16);
    assert_eq!(r.offload.as_ref().unwrap().loads, 1);
    let again = run(&w, &sends, &c, &COST, Keep::default());
    assert_eq!(format!("{:?}", r.records), format!("{:?}", again.records));
}
