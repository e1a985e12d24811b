//! Hand-computed scenarios with the affine step-time model: exact TTFT/TPOT/ITL for two
//! requests, a chunked-prefill boundary, a cache hit saving exactly its prefill, preemption and
//! resume, head-of-line blocking; conservation and determinism.

use super::*;
use crate::cache::{CacheSpec, Policy};
use crate::cost::Affine;
use crate::engine::frontend::{FailReason, RequestLimits};
use crate::engine::{EngineConfig, EngineKind};
use crate::trace::{self, ReadOptions};
use crate::workload::{build, BuildOptions};
use std::path::Path;

pub(super) const COST: Affine =
    Affine { base_s: 0.01, per_prefill_token_s: 0.001, per_decode_seq_s: 0.002, per_ctx_token_s: 0.0 };

/// Requests of `prompt_ids` lengths with distinct tokens (or `shared` prefixes), output lens.
pub(crate) fn workload(reqs: &[(Vec<u32>, u32)]) -> Workload {
    let mut doc = String::new();
    for (ids, out) in reqs {
        doc.push_str(&serde_json::json!({"prompt_ids": ids, "output_len": out}).to_string());
        doc.push('\n');
    }
    let file = trace::parse(Path::new("t.jsonl"), doc.as_bytes(), &ReadOptions::default()).unwrap();
    build(file, &BuildOptions::default()).unwrap()
}

pub(super) fn cfg(seqs: u32, tokens: u32, blocks: Option<u64>) -> SimConfig {
    SimConfig {
        engine: EngineConfig {
            max_num_seqs: seqs,
            max_num_batched_tokens: tokens,
            ..EngineConfig::new(crate::engine::EngineVersion::newest(EngineKind::Vllm))
        },
        cache: CacheSpec {
            policy: Policy::Paged,
            block_size: Some(4),
            page_size: None,
            capacity_tokens: blocks.map(|b| (b - 1) * 4),
            hybrid: None,
            sglang_pool: None,
        },
        max_concurrency: None,
        request_overhead_s: 0.0,
        limits: None,
    }
}

/// `prefill` and `decode` instances in `style`, over one 8 Gb/s lane (10^9 bytes/s) with 1 ms
/// set-up, every pool at the engine's own limits.
pub(super) fn pd_config(prefill: u32, decode: u32, style: crate::cluster::pd::PdStyle) -> crate::cluster::pd::PdConfig {
    crate::cluster::pd::PdConfig {
        prefill,
        decode,
        style,
        link: crate::cluster::pd::KvLink { gbps: 8.0, latency_ms: 1.0, links: 1 },
        prefill_max_num_seqs: None,
        prefill_max_num_batched_tokens: None,
        decode_max_num_seqs: None,
        decode_max_num_batched_tokens: None,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// `c` on two instances behind round robin.
pub(super) fn round_robin_pair(w: &Workload, sends: &[(u32, f64)], c: &SimConfig) -> SimResult {
    use crate::cluster::router::{build, RouterParams};
    let spec = InstanceSpec { role: Role::Unified, engine: c.engine, cache: c.cache, cost: &COST };
    let mut router = build(RouterKind::RoundRobin, RouterParams::default(), 2);
    drive(w, sends, &Front::of(c), &[spec; 2], router.as_mut(), None, Fleet::default(), Keep::default(), &|_, _| ())
}

pub(super) fn rec(r: &SimResult, id: u32) -> RequestRecord {
    *r.records.iter().find(|x| x.id == id).expect("request completed")
}

#[test]
fn two_requests_exact_times() {
    let w = workload(&[((0..10).collect(), 3), ((100..120).collect(), 3)]);
    let r = run(&w, &[(0, 0.0), (1, 0.0)], &cfg(8, 1000, None), &COST, Keep::default());
    // Step 1 prefills 30 tokens: 0.01 + 0.030 = 0.040 → both first tokens.
    // Steps 2 and 3 decode both: 0.01 + 2 × 0.002 = 0.014 each.
    for id in [0, 1] {
        let x = rec(&r, id);
        assert!(close(x.ttft_s(), 0.040), "{x:?}");
        assert!(close(x.latency_s(), 0.068), "{x:?}");
        assert!(close(x.tpot_s().unwrap(), 0.014));
    }
    let gaps = r.log.clone().gaps().to_vec();
    assert_eq!(gaps.iter().map(|&(_, n)| n).sum::<u64>(), 4);
    assert!(gaps.iter().all(|&(g, _)| close(g, 0.014)));
    assert!(gaps.len() <= 2, "equal gaps are one entry: {gaps:?}");
    assert_eq!(r.steps, 3);
}

#[test]
fn request_overhead_delays_the_engine_arrival_by_exactly_that() {
    let w = workload(&[((0..10).collect(), 3), ((100..120).collect(), 3)]);
    let base = run(&w, &[(0, 0.0)], &cfg(8, 1000, None), &COST, Keep::default());
    let slow = SimConfig { request_overhead_s: 0.05, ..cfg(8, 1000, None) };
    let r = run(&w, &[(0, 0.0)], &slow, &COST, Keep::default());
    // Prefill of 10 (0.020) then two decodes (0.012 each), all 0.05 later.
    let (b, x) = (rec(&base, 0), rec(&r, 0));
    assert!(close(b.ttft_s(), 0.020) && close(x.ttft_s(), 0.070), "{b:?} {x:?}");
    assert!(close(x.latency_s() - b.latency_s(), 0.05) && close(x.latency_s(), 0.094), "{x:?}");
    assert!(close(x.tpot_s().unwrap(), b.tpot_s().unwrap()));
    assert_eq!(x.send_s, 0.0, "the client's clock starts at the send");
    // One slot: B is sent when A finishes (0.094) and reaches the engine 0.05 later; its
    // prefill of 20 takes 0.030, so its TTFT is 0.080.
    let one = SimConfig { max_concurrency: Some(1), ..slow };
    let r = run(&w, &[(0, 0.0), (1, 0.0)], &one, &COST, Keep::default());
    let y = rec(&r, 1);
    assert!(close(y.send_s, 0.094) && close(y.ttft_s(), 0.080), "{y:?}");
}

#[test]
fn overlapped_steps_take_the_longer_of_host_and_device() {
    // Host 0.01 per step; device 0.001 per prefill token, 0.002 per decode sequence.
    let w = workload(&[((0..10).collect(), 3), ((100..120).collect(), 3)]);
    let overlapped =
        SimConfig { engine: EngineConfig { overlap: true, ..cfg(8, 1000, None).engine }, ..cfg(8, 1000, None) };
    let r = run(&w, &[(0, 0.0), (1, 0.0)], &overlapped, &COST, Keep::default());
    // Prefill of 30 tokens: max(0.030, 0.01) = 0.030; decodes of two: max(0.004, 0.01) = 0.010
    // (the host bounds them), against 0.040 and 0.014 taken in turn.
    for id in [0, 1] {
        let x = rec(&r, id);
        assert!(close(x.ttft_s(), 0.030), "{x:?}");
        assert!(close(x.latency_s(), 0.050), "{x:?}");
        assert!(close(x.tpot_s().unwrap(), 0.010));
    }
}

#[test]
fn vllm_v0_chunked_mode_reserves_whole_prompts_and_chunks_them() {
    let w = workload(&[((0..12).collect(), 2), ((100..104).collect(), 2)]);
    let mut c = cfg(8, 8, None);
    c.engine.engine = EngineKind::VllmV0;
    let r = run(&w, &[(0, 0.0), (1, 0.0)], &c, &COST, Keep { steps: true, ..Keep::default() });
    // Step 1: A's first 8 tokens (0.018); step 2: A's last 4 and B's 4 (0.018), both sample;
    // step 3: both decode (0.014) and finish.
    for id in [0, 1] {
        let x = rec(&r, id);
        assert!(close(x.ttft_s(), 0.036), "{x:?}");
        assert!(close(x.latency_s(), 0.050), "{x:?}");
    }
    let prefill: Vec<u64> = r.timeline.iter().map(|s| s.prefill_tokens).collect();
    assert_eq!(prefill, [8, 8, 0]);
    // Admission reserved A's whole prompt (3 blocks of 4) in step 1; v1 holds the chunk's 2.
    assert_eq!(r.timeline[0].kv_used_tokens, 12);
    c.engine.engine = EngineKind::Vllm;
    let v1 = run(&w, &[(0, 0.0), (1, 0.0)], &c, &COST, Keep { steps: true, ..Keep::default() });
    assert_eq!(v1.timeline[0].kv_used_tokens, 8);
}

#[test]
fn chunked_prefill_samples_only_after_the_last_chunk() {
    let w = workload(&[((0..20).collect(), 2)]);
    let r = run(&w, &[(0, 0.0)], &cfg(8, 8, None), &COST, Keep { steps: true, tokens: true, ..Keep::default() });
    // Chunks of 8, 8, 4 tokens (0.018, 0.018, 0.014), then one decode (0.012).
    let x = rec(&r, 0);
    assert!(close(x.ttft_s(), 0.050), "{x:?}");
    assert!(close(x.latency_s(), 0.062), "{x:?}");
    let chunks: Vec<u64> = r.timeline.iter().map(|s| s.prefill_tokens).collect();
    assert_eq!(chunks, vec![8, 8, 4, 0]);
    assert_eq!(r.timeline[3].decode_tokens, 1);
}

#[test]
fn a_cache_hit_shortens_ttft_by_exactly_the_saved_prefill() {
    let p: Vec<u32> = (0..32).collect();
    let w = workload(&[(p.clone(), 2), (p, 2)]);
    let r = run(&w, &[(0, 0.0), (1, 1.0)], &cfg(8, 1000, None), &COST, Keep::default());
    let (a, b) = (rec(&r, 0), rec(&r, 1));
    // 32 tokens = 2 blocks of 16? No: blocks of 4; (32 − 1) / 4 = 7 blocks = 28 tokens hit.
    assert_eq!(b.cached_prompt_tokens, 28);
    assert!(close(a.ttft_s() - b.ttft_s(), 28.0 * 0.001), "{} {}", a.ttft_s(), b.ttft_s());
}

#[test]
fn preemption_recomputes_the_latest_admitted_request() {
    // 4 usable blocks of 4 tokens. Both prompts (6 tokens) fit; growing past 8 tokens each
    // does not: the later request is preempted, waits, and is admitted again.
    let w = workload(&[((0..6).collect(), 8), ((100..106).collect(), 8)]);
    let r = run(
        &w,
        &[(0, 0.0), (1, 0.0)],
        &cfg(8, 1000, Some(5)),
        &COST,
        Keep { steps: true, tokens: true, ..Keep::default() },
    );
    let (a, b) = (rec(&r, 0), rec(&r, 1));
    assert_eq!((a.preemptions, b.preemptions), (0, 1));
    assert_eq!((a.output_tokens, b.output_tokens), (8, 8));
    // A is never disturbed: prefill 0.022, then 7 decodes — two shared steps (0.014) and five
    // alone (0.012).
    assert!(close(a.ttft_s(), 0.022));
    assert!(close(a.latency_s(), 0.022 + 2.0 * 0.014 + 5.0 * 0.012), "{a:?}");
    // No admission in the step that preempted: that step runs A alone.
    let preempt_step = r.timeline.iter().position(|s| s.batch_size == 1 && s.running == 1).unwrap();
    assert_eq!(r.timeline[preempt_step].prefill_tokens, 0);
    assert!(b.last_token_s > a.last_token_s);
    // B's blocks were evicted while A grew, so B recomputes all 9 known tokens (6 + 3 outputs)
    // once A has finished.
    let readmit = r.timeline.iter().rposition(|s| s.prefill_tokens > 0).unwrap();
    assert_eq!(r.timeline[readmit].prefill_tokens, 9);
    assert!(close(r.timeline[readmit].start_s, a.last_token_s));
}

#[test]
fn head_of_line_blocking_and_max_num_seqs() {
    // max_num_seqs 1: the second request waits for the first to finish, whatever its size.
    let w = workload(&[((0..10).collect(), 2), ((100..102).collect(), 1)]);
    let r = run(&w, &[(0, 0.0), (1, 0.0)], &cfg(1, 1000, None), &COST, Keep::default());
    let (a, b) = (rec(&r, 0), rec(&r, 1));
    assert!(close(a.last_token_s, 0.020 + 0.012));
    assert!(close(b.first_token_s, a.last_token_s + 0.012), "{b:?}");
    assert_eq!(b.tpot_s(), None);
}

#[test]
fn oversized_requests_fail_and_the_rest_complete() {
    let w = workload(&[((0..100).collect(), 2), ((200..204).collect(), 2)]);
    let r = run(&w, &[(0, 0.0), (1, 0.0)], &cfg(8, 1000, Some(5)), &COST, Keep::default());
    assert_eq!(r.failed, 1);
    assert_eq!(r.records.len(), 1);
    assert_eq!(r.records[0].id, 1);
}

#[test]
fn conservation_and_determinism_on_the_sample() {
    let w = crate::load_workload(None, &ReadOptions::default(), &BuildOptions::default()).unwrap();
    let sends: Vec<(u32, f64)> = (0..w.requests.len() as u32).map(|i| (i, 0.0)).collect();
    // Every scheduler over the same paged cache (16 slots, 1,999 blocks of 4); 512 tokens a
    // step with chunked prefill, whole prompts otherwise (as vLLM requires).
    for (engine, chunked, overlap) in [
        (EngineKind::Vllm, true, false),
        (EngineKind::Vllm, true, true),
        (EngineKind::Vllm, false, false),
        (EngineKind::VllmV0, false, false),
        (EngineKind::VllmV0, true, false),
        (EngineKind::Sglang, false, true),
        (EngineKind::Lightllm, false, false),
    ] {
        let mut c = cfg(16, if chunked { 512 } else { 1 << 20 }, Some(2000));
        let version = crate::engine::EngineVersion::newest(engine);
        c.engine = EngineConfig {
            engine,
            version,
            rules: version.rules(),
            enable_chunked_prefill: chunked,
            overlap,
            ..c.engine
        };
        conserves_and_repeats(&w, &sends, &c);
    }
}

#[test]
fn a_run_of_some_requests_matches_the_same_run_over_only_those() {
    // Sending some of the requests numbers only their blocks; nothing else may change.
    let w = crate::load_workload(None, &ReadOptions::default(), &BuildOptions::default()).unwrap();
    let k = w.requests.len() / 3;
    let part =
        Workload { store: w.store.clone(), requests: w.requests[..k].to_vec(), info: w.info.clone(), sample: None };
    let sends: Vec<(u32, f64)> = (0..k as u32).map(|i| (i, i as f64 * 0.02)).collect();
    let c = cfg(16, 512, Some(400));
    let keep = Keep { steps: true, ..Keep::default() };
    let (a, b) = (run(&w, &sends, &c, &COST, keep), run(&part, &sends, &c, &COST, keep));
    assert_eq!(a.records, b.records);
    assert_eq!(a.timeline, b.timeline);
    assert_eq!(a.cache, b.cache);
    assert!(
        a.cache.evicted_tokens > 0 && a.records.iter().any(|r| r.cached_prompt_tokens > 0),
        "a run that shares and evicts"
    );
}

fn conserves_and_repeats(w: &Workload, sends: &[(u32, f64)], c: &SimConfig) {
    let a = run(w, sends, c, &COST, Keep { steps: true, tokens: true, ..Keep::default() });
    assert_eq!(a.records.len() as u64 + a.failed, w.requests.len() as u64);
    let mut seen = vec![0; w.requests.len()];
    for x in &a.records {
        seen[x.id as usize] += 1;
        assert_eq!(x.output_tokens, w.requests[x.id as usize].output_len.max(1));
        assert!(x.first_token_s <= x.last_token_s && x.send_s <= x.first_token_s);
    }
    assert!(seen.iter().all(|&s| s == 1));
    let emitted: u64 = a.log.total();
    assert_eq!(emitted, a.records.iter().map(|x| x.output_tokens as u64).sum::<u64>());
    assert!(a.timeline.iter().all(|s| s.kv_used_tokens <= 1999 * 4));
    let b = run(w, sends, c, &COST, Keep { steps: true, tokens: true, ..Keep::default() });
    assert_eq!(a.records, b.records);
    assert_eq!(a.timeline, b.timeline);
    assert_eq!(a.tokens, b.tokens);
    // Token records agree with the requests' first and last token times.
    assert_eq!(a.tokens.len() as u64, emitted);
    for x in &a.records {
        let mine: Vec<&TokenRecord> = a.tokens.iter().filter(|t| t.id == x.id).collect();
        assert_eq!(mine.len() as u32, x.output_tokens);
        assert_eq!((mine[0].index, mine[0].time_s), (0, x.first_token_s));
        assert_eq!(mine.last().unwrap().time_s, x.last_token_s);
    }
}

pub(super) fn sglang_cfg(running: u32, chunk: u32, capacity: Option<u64>) -> SimConfig {
    let mut c = cfg(running, 16384, None);
    c.engine.engine = EngineKind::Sglang;
    c.engine.max_prefill_tokens = 16384;
    c.engine.chunked_prefill_size = chunk;
    c.cache = CacheSpec {
        policy: Policy::Radix,
        block_size: None,
        page_size: Some(1),
        capacity_tokens: capacity,
        hybrid: None,
        sglang_pool: None,
    };
    c
}

#[test]
fn sglang_prefill_has_priority_over_decode() {
    let w = workload(&[((0..10).collect(), 3), ((100..120).collect(), 2)]);
    let r = run(
        &w,
        &[(0, 0.0), (1, 0.03)],
        &sglang_cfg(8, 0, None),
        &COST,
        Keep { steps: true, tokens: true, ..Keep::default() },
    );
    let (a, b) = (rec(&r, 0), rec(&r, 1));
    // t=0 prefill A (0.020); t=0.020 decode A (0.012); t=0.032 B has arrived: prefill B alone
    // (0.030) while A's decode stalls; t=0.062 decode A and B (0.014).
    assert!(close(a.ttft_s(), 0.020));
    assert!(close(b.first_token_s, 0.062) && close(b.ttft_s(), 0.032), "{b:?}");
    assert!(close(a.last_token_s, 0.076) && close(b.last_token_s, 0.076));
    let kinds: Vec<(u64, u32)> = r.timeline.iter().map(|s| (s.prefill_tokens, s.decode_tokens)).collect();
    assert_eq!(kinds, vec![(10, 0), (0, 1), (20, 0), (0, 2)]);
}

#[test]
fn sglang_chunks_stall_decodes_and_share_after_each_chunk() {
    let w = workload(&[((0..4).collect(), 4), ((100..120).collect(), 1)]);
    let r = run(
        &w,
        &[(0, 0.0), (1, 0.001)],
        &sglang_cfg(8, 8, None),
        &COST,
        Keep { steps: true, tokens: true, ..Keep::default() },
    );
    let kinds: Vec<(u64, u32)> = r.timeline.iter().map(|s| (s.prefill_tokens, s.decode_tokens)).collect();
    // A prefills (4), then B's 20 tokens go in chunks of 8, 8, 4, each a prefill step; A's
    // decodes wait for the last chunk.
    assert_eq!(kinds, vec![(4, 0), (8, 0), (8, 0), (4, 0), (0, 1), (0, 1), (0, 1)]);
    assert_eq!(rec(&r, 1).output_tokens, 1);
}

#[test]
fn sglang_retracts_the_request_with_the_fewest_outputs() {
    // A pool of 64 tokens. A (prompt 8, 30 outputs) starts first. At 0.05 s SGLang admits B
    // (12 prompt + 30 reserved outputs fit in what is left) but not C. A and B together outgrow
    // the pool (37 + 41 tokens of KV): the victim is the one with the fewest outputs, B, which
    // goes to the end of the waiting queue and is prefilled again later. (SGLang 0.5.1's rules:
    // 0.5 reserves a running ignore-EOS request's outputs in full, which never over-commits.)
    let w = workload(&[((0..8).collect(), 30), ((100..112).collect(), 30), ((200..208).collect(), 30)]);
    let mut c = sglang_cfg(8, 0, Some(64));
    c.engine.version = crate::engine::EngineVersion::Sglang051;
    c.engine.rules = c.engine.version.rules();
    c.engine.schedule_conservativeness = 0.0; // reserve nothing for future decodes: admit all three
    let r =
        run(&w, &[(0, 0.0), (1, 0.05), (2, 0.05)], &c, &COST, Keep { steps: true, tokens: true, ..Keep::default() });
    assert_eq!(r.records.len(), 3);
    let (a, b, cc) = (rec(&r, 0), rec(&r, 1), rec(&r, 2));
    assert_eq!(a.preemptions, 0);
    assert!(b.preemptions >= 1, "{b:?}");
    assert!(b.preemptions >= cc.preemptions);
    assert!(b.last_token_s > a.last_token_s);
    assert!(r.timeline.iter().all(|s| s.kv_used_tokens <= 64));
}

fn lightllm_cfg(capacity: Option<u64>) -> SimConfig {
    let mut c = cfg(1000, 8448, None);
    c.engine.engine = EngineKind::Lightllm;
    c.engine.chunked_prefill_size = 4096;
    c.cache = CacheSpec {
        policy: Policy::Token,
        block_size: None,
        page_size: None,
        capacity_tokens: capacity,
        hybrid: None,
        sglang_pool: None,
    };
    c
}

#[test]
fn lightllm_decode_pass_then_prefill_pass() {
    let w = workload(&[((0..10).collect(), 3), ((100..120).collect(), 2)]);
    let r = run(&w, &[(0, 0.0), (1, 0.03)], &lightllm_cfg(None), &COST, Keep::default());
    let (a, b) = (rec(&r, 0), rec(&r, 1));
    // t=0 prefill A (0.020); t=0.020 decode A (0.012); t=0.032 decode A (0.012) and then, in a
    // second forward, prefill B (0.030); t=0.074 decode B (0.012).
    assert!(close(a.ttft_s(), 0.020));
    assert!(close(a.last_token_s, 0.074), "{a:?}");
    assert!(close(b.ttft_s(), 0.044) && close(b.last_token_s, 0.086), "{b:?}");
}

#[test]
fn lightllm_admits_by_estimated_peak_footprint() {
    // Each request holds 11 tokens and may grow by 19 + 6 + 7 (one chunk of delay): alone the
    // peak is 43, together 86. With 50 slots B waits for A, though both prompts fit at once.
    let w = workload(&[((0..10).collect(), 20), ((100..110).collect(), 20)]);
    let r = run(&w, &[(0, 0.0), (1, 0.0)], &lightllm_cfg(Some(50)), &COST, Keep::default());
    let (a, b) = (rec(&r, 0), rec(&r, 1));
    assert!(b.first_scheduled_s >= a.last_token_s, "{a:?} {b:?}");
    assert_eq!((a.preemptions, b.preemptions), (0, 0));
    let r = run(&w, &[(0, 0.0), (1, 0.0)], &lightllm_cfg(Some(87)), &COST, Keep::default());
    assert!(close(rec(&r, 1).first_scheduled_s, 0.0));
}

#[test]
fn vllm_v0_runs_prefills_first_and_no_decode_with_them() {
    let w = workload(&[((0..10).collect(), 3), ((100..120).collect(), 2)]);
    let mut c = cfg(8, 1000, None);
    c.engine.engine = EngineKind::VllmV0;
    c.engine.enable_chunked_prefill = false;
    let r = run(&w, &[(0, 0.0), (1, 0.03)], &c, &COST, Keep { steps: true, tokens: true, ..Keep::default() });
    let (a, b) = (rec(&r, 0), rec(&r, 1));
    // t=0 prefill A (0.020); decode A (0.012); t=0.032 prefill B alone (0.030); decode both (0.014).
    assert!(close(a.last_token_s, 0.076) && close(b.first_token_s, 0.062) && close(b.last_token_s, 0.076));
    let kinds: Vec<(u64, u32)> = r.timeline.iter().map(|s| (s.prefill_tokens, s.decode_tokens)).collect();
    assert_eq!(kinds, vec![(10, 0), (0, 1), (20, 0), (0, 2)]);
}

#[test]
fn a_rejected_request_fails_on_arrival_and_frees_its_slot() {
    // max_model_len 20: the 30-token request fails when sent; with one slot, the next one is
    // sent at once (t = 0), not after a timeout.
    let w = workload(&[((0..30).collect(), 2), ((100..110).collect(), 2)]);
    let mut c = cfg(8, 1000, None);
    c.max_concurrency = Some(1);
    c.limits = Some(RequestLimits { max_model_len: 20, pool_tokens: 1 << 20 });
    let r = run(&w, &[(0, 0.0), (1, 0.0)], &c, &COST, Keep::default());
    assert_eq!(r.failed, 1);
    assert_eq!(r.failures[&FailReason::ContextLength].0, 1);
    let b = rec(&r, 1);
    assert_eq!(b.send_s, 0.0);
    // Alone: prefill of 10 (0.020), one decode (0.012).
    assert!(close(b.first_token_s, 0.020) && close(b.last_token_s, 0.032), "{b:?}");
    assert_eq!(r.steps, 2);
}

#[test]
fn sglang_serves_zero_outputs_as_a_prefill_and_cuts_to_the_pool() {
    // Pool of 40: max_req_len 39; (10, 0) is a prefill only; (20, 50) is cut to 39 − 20 − 1 = 18.
    let w = workload(&[((0..10).collect(), 0), ((100..120).collect(), 50)]);
    let mut c = sglang_cfg(8, 0, Some(40));
    c.limits = Some(RequestLimits { max_model_len: 1000, pool_tokens: 40 });
    let r = run(&w, &[(0, 0.0), (1, 0.5)], &c, &COST, Keep { tokens: true, ..Keep::default() });
    assert_eq!(r.failed, 0);
    let (a, b) = (rec(&r, 0), rec(&r, 1));
    assert_eq!(a.output_tokens, 0);
    assert!(close(a.first_token_s, 0.020) && close(a.last_token_s, 0.020), "{a:?}");
    assert_eq!(a.tpot_s(), None);
    assert_eq!(b.output_tokens, 18);
    assert_eq!(r.outputs_cut, (1, 32));
    assert_eq!(r.tokens.iter().filter(|t| t.id == 0).count(), 0, "no token for a prefill-only request");
}
