//! Hand-computed scenarios of the LMCache connector (`engine::vllm_offload::lmcache`) under the
//! affine step-time model (0.01 s a step, 1 ms a prefill token, 2 ms a decode), 4-token blocks,
//! 8-token chunks and 1 ms to copy a chunk either way: a prefix the GPU lost loaded before the
//! forward of the step that admits it, the saves after each forward, a hit of every prompt token
//! keeping the last one to compute, a backend too small to keep the prefix, the prefix read
//! back from the local disk behind it, and from LMCache's remote server — the same instance's
//! puts, or another instance's.

use super::tests::{cfg, round_robin_pair, workload, COST};
use super::*;
use crate::engine::vllm_offload::lmcache::remote::RemoteConfig;
use crate::engine::vllm_offload::DiskConfig;
use crate::engine::EngineVersion;
use proptest::prelude::*;

/// `cfg` as vLLM 0.18 with `blocks` GPU blocks (the null block included) and an LMCache backend
/// of `chunks` 8-token chunks.
fn lmcache(blocks: u64, chunks: Option<u64>) -> SimConfig {
    let mut c = cfg(16, 1000, Some(blocks));
    c.engine = EngineConfig::new(EngineVersion::Vllm018);
    c.engine.max_num_seqs = 16;
    c.engine.max_num_batched_tokens = 1000;
    c.engine.offload = chunks.map(crate::engine::vllm_offload::lmcache::scenario_config);
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
    assert_eq!(d.hit_tokens, 16, "every loaded token came from disk");
    assert!(close(d.read_s, 0.004) && close(d.write_s, 0.016), "{d:?}");
    // A and F are unchanged by the disk: its writes do not hold their steps.
    let plain = run(&w, &sends, &lmcache(13, Some(6)), &COST, Keep::default());
    for id in [0, 1] {
        assert!(close(rec(&r, id).latency_s(), rec(&plain, id).latency_s()));
    }
}

/// A remote server behind the CPU backend: 0.5 ms a round trip, 1 ms to send a chunk.
const REMOTE: RemoteConfig = RemoteConfig { rtt_s: 5e-4, bytes_per_s: 1e6 };

fn with_remote(mut c: SimConfig) -> SimConfig {
    if let Some(o) = c.engine.offload.as_mut() {
        o.remote = Some(REMOTE);
    }
    c
}

/// The 6-chunk CPU backend with LMCache's remote server behind it. Every lookup asks the server
/// for the chunks the CPU lacks, one round trip each, before the step's forward: A's (one miss,
/// 0.5 ms) and F's (one miss) find nothing. A's chunks are put when A's step ends (0.0285: done
/// at 0.0295 and 0.0305), so when F's save evicts them from the CPU the server still holds them:
/// B's lookup finds both (two round trips, 0.200–0.201), its load gets them (a round trip and a
/// send each, 0.201–0.204), puts them back into the CPU and copies them to the GPU (2 ms), then
/// B's 4 new tokens (0.014 s).
#[test]
fn a_prefix_the_cpu_lost_is_read_back_from_the_remote_server() {
    let (w, sends) = after_a(500..504);
    let r = run(&w, &sends, &with_remote(lmcache(13, Some(6))), &COST, Keep::default());
    assert!(close(rec(&r, 0).ttft_s(), 0.0285), "{:?}", rec(&r, 0));
    assert!(close(rec(&r, 1).ttft_s(), 0.0645), "{:?}", rec(&r, 1));
    let b = rec(&r, 2);
    assert!(close(b.ttft_s(), 0.020), "{b:?}");
    assert!(close(b.latency_s(), 0.032), "{b:?}");
    assert_eq!(b.cached_prompt_tokens, 16);
    let h = r.offload.expect("the backend's figures");
    assert_eq!((h.host_hit_tokens, h.loads, h.loaded_chunks), (16, 1, 2));
    // The CPU: A's 2 and F's 6 saved; A's 2 evicted by F, then 2 of F's by A's read back.
    assert_eq!((h.tier.stored_chunks, h.tier.evicted_chunks, h.tier.peak_chunks), (8, 4, 6));
    let x = h.remote.expect("the remote figures");
    assert_eq!((x.exists_calls, x.read_chunks, x.written_chunks, x.skipped_puts, x.held_chunks), (4, 2, 8, 0, 8));
    assert_eq!(x.hit_tokens, 16, "every loaded token came from the server");
    assert!(close(x.held_gib_per_rank(), 8000.0 / (1u64 << 30) as f64), "8 chunks of 1000 bytes: {x:?}");
    assert!(close(x.lookup_s, 0.002) && close(x.read_s, 0.003) && close(x.write_s, 0.008), "{x:?}");
}

/// Two instances behind round robin, each with its own 32-chunk CPU backend and one remote
/// server between them: A on instance 0 at 0, B (A's prompt and 4 more tokens) on instance 1 at
/// 0.2. B's CPU is empty, but the server holds A's chunks: B loads them as above (0.020 s to its
/// first token) where, without the server, it computes its 20 tokens and saves 2 chunks
/// (0.032 s).
#[test]
fn the_remote_server_gives_one_instance_the_chunks_another_saved() {
    let a: Vec<u32> = (0..16).collect();
    let b: Vec<u32> = (0..20).collect();
    let w = workload(&[(a, 1), (b, 2)]);
    let sends = [(0, 0.0), (1, 0.2)];
    let two = |c: SimConfig| round_robin_pair(&w, &sends, &c);
    let (own, shared) = (two(lmcache(13, Some(32))), two(with_remote(lmcache(13, Some(32)))));
    for r in [&own, &shared] {
        assert_eq!(r.assigned[..2], [0, 1]);
    }
    assert!(close(rec(&own, 1).ttft_s(), 0.032), "{:?}", rec(&own, 1));
    assert_eq!(rec(&own, 1).cached_prompt_tokens, 0);
    let b = rec(&shared, 1);
    assert!(close(b.ttft_s(), 0.020), "{b:?}");
    assert_eq!(b.cached_prompt_tokens, 16);
    let x = shared.offload.expect("the backend's figures").remote.expect("the remote figures");
    // A's miss, B's two hits; A's two chunks put, and nothing of B's (its 20 tokens reach no
    // chunk past the 16 it loaded).
    assert_eq!((x.exists_calls, x.read_chunks, x.written_chunks, x.held_chunks), (3, 2, 2, 2));
    assert_eq!(format!("{:?}", shared.records), format!("{:?}", two(with_remote(lmcache(13, Some(32)))).records));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any workload of shared prefixes (so requests load what others saved, and preempted ones
    /// come back and load again), GPU pool, step budget, CPU backend and disk: every request
    /// completes, the backends' bookkeeping holds at every step (checked in `priced` under debug
    /// assertions), and the figures add up — a load's chunks cover what it brings back, and
    /// nothing is held beyond capacity.
    #[test]
    fn lmcache_runs_keep_their_books(
        reqs in proptest::collection::vec((0u32..4, 1u32..40, 1u32..30, 0.0f64..1.0), 1..20),
        blocks in 6u64..40,
        seqs in 1u32..6,
        tokens in 8u32..64,
        cpu in 1u64..12,
        disk in prop_oneof![Just(None), (1u64..16, 1e5f64..1e7).prop_map(Some)],
        remote in prop_oneof![Just(None), (1e-5f64..1e-2, 1e5f64..1e7).prop_map(Some)],
    ) {
        let specs: Vec<(Vec<u32>, u32)> = reqs
            .iter()
            .enumerate()
            .map(|(i, &(prefix, len, out, _))| {
                let shared = (0..8 * prefix).map(|t| 10_000 + t);
                (shared.chain((0..len).map(|t| i as u32 * 100 + t)).collect(), out)
            })
            .collect();
        let w = workload(&specs);
        let mut sends: Vec<(u32, f64)> = reqs.iter().enumerate().map(|(i, r)| (i as u32, r.3)).collect();
        sends.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut c = lmcache(blocks, Some(cpu));
        c.engine.max_num_seqs = seqs;
        c.engine.max_num_batched_tokens = tokens.max(seqs);
        if let Some(o) = c.engine.offload.as_mut() {
            o.disk = disk.map(|(chunks, rate)| DiskConfig { size_gib: 1.0, chunks, bytes_per_s: rate });
            o.remote = remote.map(|(rtt_s, bytes_per_s)| RemoteConfig { rtt_s, bytes_per_s });
        }
        let r = run(&w, &sends, &c, &COST, Keep::default());
        let h = r.offload.expect("the backend's figures");
        prop_assert_eq!(r.records.len() as u64 + r.failed, reqs.len() as u64);
        // A load copies whole chunks from the one holding the GPU hit's end: at most a chunk
        // (and the last token, recomputed) more than the tokens it brings back.
        prop_assert!(h.host_hit_tokens <= h.loaded_chunks * 8, "{h:?}");
        prop_assert!(h.loaded_chunks * 8 <= h.host_hit_tokens + 9 * h.loads, "{h:?}");
        prop_assert!(h.loaded_chunks >= h.loads && h.tier.peak_chunks <= cpu, "{h:?}");
        prop_assert!(h.tier.stored_chunks <= h.tier.evicted_chunks + cpu, "{h:?}");
        if let (Some(d), Some((chunks, _))) = (h.disk, disk) {
            prop_assert!(d.peak_chunks <= chunks && d.read_chunks <= h.loaded_chunks, "{d:?}");
        }
        if let Some(x) = h.remote {
            prop_assert!(x.read_chunks <= h.loaded_chunks && x.held_chunks <= x.written_chunks, "{x:?}");
        }
        // The tokens loaded from the disk and the server are among those loaded.
        let (disk_tokens, remote_tokens) = (h.disk.map_or(0, |d| d.hit_tokens), h.remote.map_or(0, |x| x.hit_tokens));
        prop_assert!(disk_tokens + remote_tokens <= h.host_hit_tokens, "{h:?}");
    }
}
