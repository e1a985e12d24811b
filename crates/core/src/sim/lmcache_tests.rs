//! Hand-computed scenarios of the LMCache connector (`engine::vllm_offload::lmcache`) under the
//! affine step-time model (0.01 s a step, 1 ms a prefill token, 2 ms a decode), 4-token blocks,
//! 8-token chunks and 1 ms to copy a chunk either way: a prefix the GPU lost loaded before the
//! forward of the step that admits it, the saves after each forward, a hit of every prompt token
//! keeping the last one to compute, a backend too small to keep the prefix, and the prefix read
//! back from the local disk behind it.

use super::tests::{cfg, workload, COST};
use super::*;
use crate::engine::vllm_offload::{DiskConfig, OffloadBackend, OffloadConfig};
use crate::engine::EngineVersion;

/// `cfg` as vLLM 0.18 with `blocks` GPU blocks (the null block included) and an LMCache backend
/// of `chunks` 8-token chunks.
fn lmcache(blocks: u64, chunks: Option<u64>) -> SimConfig {
    let mut c = cfg(16, 1000, Some(blocks));
    c.engine = EngineConfig { ..EngineConfig::new(EngineVersion::Vllm018) };
    c.engine.max_num_seqs = 16;
    c.engine.max_num_batched_tokens = 1000;
    c.engine.offload = chunks.map(|chunks| OffloadConfig {
        backend: OffloadBackend::Lmcache,
        size_gib: 1.0,
        chunks,
        chunk_tokens: 8,
        block_tokens: 4,
        chunk_bytes_per_rank: 1000,
        link_bytes_per_s: 1e6,
        disk: None,
    });
    c
}

fn rec(r: &SimResult, id: u32) -> RequestRecord {
    *r.records.iter().find(|x| x.id == id).expect("request completed")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// A (16 tokens, 1 output) at 0, F (48 other tokens) at 0.1 taking every GPU block, then B at 0.2:
/// A's prompt and `extra` more tokens, 2 outputs.
fn after_a(extra: std::ops::Range<u32>) -> (Workload, Vec<(u32, f64)>) {
    let a: Vec<u32> = (0..16).collect();
    let mut b = a.clone();
    b.extend(extra);
    let w = workload(&[(a, 1), ((100..148).collect(), 1), (b, 2)]);
    (w, vec![(0, 0.0), (1, 0.1), (2, 0.2)])
}

#[test]
fn a_prefix_the_gpu_lost_is_loaded_before_the_forward() {
    let (w, sends) = after_a(500..504);
    let plain = run(&w, &sends, &lmcache(13, None), &COST, Keep::default());
    // Without the backend B computes its 20 tokens: 0.01 + 0.020.
    assert!(close(rec(&plain, 2).ttft_s(), 0.030), "{:?}", rec(&plain, 2));
    let r = run(&w, &sends, &lmcache(13, Some(32)), &COST, Keep::default());
    // A: 16 tokens (0.026 s), then its 2 chunks saved (2 ms): first token at 0.028.
    assert!(close(rec(&r, 0).ttft_s(), 0.028), "{:?}", rec(&r, 0));
    // F: 48 tokens (0.058 s) and 6 chunks (6 ms).
    assert!(close(rec(&r, 1).ttft_s(), 0.064), "{:?}", rec(&r, 1));
    // B: no GPU hit, both of A's chunks held: 16 tokens loaded (2 ms) before a forward of its 4
    // new tokens (0.014 s); nothing saved (20 tokens reach no chunk past the 16 held). Its
    // decode: 0.012 s.
    let b = rec(&r, 2);
    assert!(close(b.ttft_s(), 0.016), "{b:?}");
    assert!(close(b.latency_s(), 0.028), "{b:?}");
    assert_eq!(b.cached_prompt_tokens, 16, "the loaded tokens count as cached");
    let h = r.offload.expect("the backend's figures");
    assert_eq!((h.host_hit_tokens, h.loads, h.loaded_chunks), (16, 1, 2));
    assert_eq!((h.tier.stored_chunks, h.tier.evicted_chunks, h.tier.refused_stores, h.tier.peak_chunks), (8, 0, 0, 8));
    assert!(close(h.load_s, 0.002) && close(h.store_s, 0.008), "{h:?}");
    assert_eq!((h.deferred_lookups, h.flushes), (0, 0));
}

/// B is A's 16 tokens exactly: every chunk hits, so one token is left to compute (15 loaded).
#[test]
fn a_hit_of_every_token_leaves_the_last_one_to_compute() {
    let (w, sends) = after_a(0..0);
    let r = run(&w, &sends, &lmcache(13, Some(32)), &COST, Keep::default());
    // Two chunks loaded (2 ms), then one token whose forward is shaped as a decode (0.012 s).
    let b = rec(&r, 2);
    assert!(close(b.ttft_s(), 0.014), "{b:?}");
    assert_eq!(b.cached_prompt_tokens, 15);
    let h = r.offload.expect("the backend's figures");
    assert_eq!((h.host_hit_tokens, h.loads, h.loaded_chunks), (15, 1, 2));
}

/// A backend of 6 chunks: F's 6 chunks evict A's 2, so B finds nothing, computes its 20 tokens
/// and saves its 2 chunks over F's 2 least recent (0.030 + 0.002).
#[test]
fn a_backend_too_small_loses_the_prefix() {
    let (w, sends) = after_a(500..504);
    let r = run(&w, &sends, &lmcache(13, Some(6)), &COST, Keep::default());
    let b = rec(&r, 2);
    assert!(close(b.ttft_s(), 0.032), "{b:?}");
    assert_eq!(b.cached_prompt_tokens, 0);
    let h = r.offload.expect("the backend's figures");
    assert_eq!((h.host_hit_tokens, h.loads), (0, 0));
    assert_eq!((h.tier.stored_chunks, h.tier.evicted_chunks, h.tier.peak_chunks), (10, 4, 6));
}

/// The same with a local disk of 32 chunks at 2 ms a chunk behind the 6-chunk CPU backend: A's
/// chunks, written through at the end of A's step (done by 0.032), are evicted from the CPU by
/// F's save but read back from disk for B (4 ms), then copied to the GPU (2 ms) before B's
/// forward of 4 tokens (0.014 s).
#[test]
fn a_prefix_the_cpu_lost_is_read_back_from_disk() {
    let (w, sends) = after_a(500..504);
    let mut c = lmcache(13, Some(6));
    if let Some(o) = c.engine.offload.as_mut() {
        o.disk = Some(DiskConfig { size_gib: 1.0, chunks: 32, bytes_per_s: 5e5 });
    }
    let r = run(&w, &sends, &c, &COST, Keep::default());
    let b = rec(&r, 2);
    assert!(close(b.ttft_s(), 0.020), "{b:?}");
    assert_eq!(b.cached_prompt_tokens, 16);
    let h = r.offload.expect("the backend's figures");
    assert_eq!((h.host_hit_tokens, h.loads, h.loaded_chunks), (16, 1, 2));
    // The CPU: A's 2 and F's 6 saved; A's 2 evicted by F, then 2 of F's by A's read back.
    assert_eq!((h.tier.stored_chunks, h.tier.evicted_chunks), (8, 4));
    let d = h.disk.expect("the disk's figures");
    assert_eq!((d.read_chunks, d.written_chunks, d.skipped_writes, d.evicted_chunks, d.peak_chunks), (2, 8, 0, 0, 8));
    assert!(close(d.read_s, 0.004) && close(d.write_s, 0.016), "{d:?}");
    // A and F are unchanged by the disk: its writes do not hold their steps.
    let plain = run(&w, &sends, &lmcache(13, Some(6)), &COST, Keep::default());
    for id in [0, 1] {
        assert!(close(rec(&r, id).latency_s(), rec(&plain, id).latency_s()));
    }
}
