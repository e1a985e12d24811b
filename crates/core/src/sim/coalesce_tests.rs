//! Coalesced decode steps change nothing ([`Instance::coalesce`]): hand-computed stretches
//! (one request decoding alone; a waiting head refused until a finish frees its blocks; an
//! arrival cutting a stretch; TensorRT-LLM's refused head), and a property over random
//! workloads, pools, policies, routers, fleets, vLLM's hybrid layouts (sliding-window groups
//! beside full ones, or alone), TensorRT-LLM's admission and LMCache's CPU and disk backends,
//! comparing every field of the run with and without coalescing.

use super::tests::{cfg, workload};
use super::*;
use crate::cluster::router::{build, RouterParams};
use crate::cost::Affine;
use crate::engine::SchedulingPolicy;
use proptest::prelude::*;

/// Step times that grow with the context, so every step of a stretch has its own price.
const COST: Affine =
    Affine { base_s: 0.01, per_prefill_token_s: 0.001, per_decode_seq_s: 0.002, per_ctx_token_s: 1e-5 };

/// `w` on `n` instances behind `kind`, with and without coalescing: the coalesced run, after
/// checking that the stepped one is the same in every field.
fn both(w: &Workload, sends: &[(u32, f64)], c: &SimConfig, n: usize, kind: RouterKind, keep: Keep) -> SimResult {
    let spec = InstanceSpec { role: Role::Unified, engine: c.engine, cache: c.cache, cost: &COST };
    let run = |every_step| {
        let mut router = build(kind, RouterParams::default(), n);
        let keep = Keep { every_step, ..keep };
        drive(w, sends, &Front::of(c), &vec![spec; n], router.as_mut(), None, Fleet::default(), keep, &|_, _| ())
    };
    let (mut coalesced, mut stepped) = (run(false), run(true));
    assert_eq!(stepped.coalesced_steps, 0);
    stepped.coalesced_steps = coalesced.coalesced_steps;
    coalesced.log.settle();
    stepped.log.settle();
    let (a, b) = (format!("{coalesced:?}"), format!("{stepped:?}"));
    if let Some(k) = a.bytes().zip(b.bytes()).position(|(x, y)| x != y).or((a.len() != b.len()).then_some(0)) {
        let at = |s: &str| s[k.saturating_sub(400)..(k + 200).min(s.len())].to_string();
        panic!("coalescing changed the run at byte {k}:\ncoalesced …{}…\nstepped   …{}…", at(&a), at(&b));
    }
    coalesced
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

const ALL: Keep = Keep { steps: true, tokens: true, schedule: true, every_step: false };

#[test]
fn a_request_decoding_alone_runs_its_decodes_as_one_stretch() {
    // Prompt 10 (blocks of 4), 6 outputs: a prefill step, then 5 decodes at contexts 10..14.
    let w = workload(&[((0..10).collect(), 6)]);
    let r = both(&w, &[(0, 0.0)], &cfg(8, 1000, None), 1, RouterKind::RoundRobin, ALL);
    // The first decode is formed by the scheduler; the next three inside the stretch; the
    // last (it finishes the request) is the stretch's step left in flight, formed inside it.
    assert_eq!((r.steps, r.coalesced_steps), (6, 4));
    let x = r.records[0];
    let prefill = 0.01 + 10.0 * 0.001;
    let decodes: f64 = (10..15).map(|ctx| 0.01 + 0.002 + ctx as f64 * 1e-5).sum();
    assert!(close(x.ttft_s(), prefill), "{x:?}");
    assert!(close(x.latency_s(), prefill + decodes), "{x:?}");
    assert_eq!(r.tokens.len(), 6);
    assert_eq!(r.timeline.len(), 6);
    assert_eq!(r.schedule.iter().map(|s| s.items[0].2).collect::<Vec<_>>(), [0, 10, 11, 12, 13, 14]);
}

/// With LMCache's CPU backend the same request's decodes coalesce as without it: a decoding
/// request saves nothing.
#[test]
fn an_lmcache_tier_leaves_the_decodes_to_one_stretch() {
    let w = workload(&[((0..10).collect(), 6)]);
    let mut c = cfg(8, 1000, None);
    c.engine.offload = Some(crate::engine::vllm_offload::lmcache::scenario_config(4));
    let r = both(&w, &[(0, 0.0)], &c, 1, RouterKind::RoundRobin, ALL);
    assert_eq!((r.steps, r.coalesced_steps), (6, 4));
    assert_eq!(r.offload.expect("the backend's figures").tier.stored_chunks, 1, "the prompt's full chunk");
}

/// With vLLM's own tier a lone request's decodes coalesce as without it: its prompt's two full
/// chunks are stored after its prefill (the copy seen during the stretch is seen at the next
/// step formed), and nothing waits.
#[test]
fn a_native_tier_leaves_a_lone_requests_decodes_to_one_stretch() {
    let w = workload(&[((0..10).collect(), 6)]);
    let mut c = cfg(8, 1000, None);
    c.engine.offload = Some(super::offload_tests::tier(8));
    let r = both(&w, &[(0, 0.0)], &c, 1, RouterKind::RoundRobin, ALL);
    assert_eq!((r.steps, r.coalesced_steps), (6, 4));
    assert_eq!(r.offload.expect("the tier's figures").tier.stored_chunks, 2, "the prompt's full chunks");
}

/// A request refused for room while the tier is on: while A's prompt chunks are being stored
/// the waiting B's lookup could defer, so those steps are the scheduler's; once the copy is
/// seen, B's lookup gives the same answer at every step and A's decodes coalesce around it.
#[test]
fn a_native_tier_coalesces_past_a_refused_head_once_its_copies_are_seen() {
    // 6 blocks of 4 (5 usable, 20 tokens): A (12 prompt, 8 out) grows to 5 blocks; B (12
    // prompt) waits for room until A finishes.
    let w = workload(&[((0..12).collect(), 8), ((100..112).collect(), 2)]);
    let mut c = cfg(8, 1000, Some(6));
    c.engine.offload = Some(super::offload_tests::tier(16));
    let r = both(&w, &[(0, 0.0), (1, 0.02)], &c, 1, RouterKind::RoundRobin, ALL);
    let (a, b) = (r.records.iter().find(|x| x.id == 0).unwrap(), r.records.iter().find(|x| x.id == 1).unwrap());
    assert!(b.first_scheduled_s >= a.last_token_s, "B entered when A finished: {a:?} {b:?}");
    assert!(r.coalesced_steps > 0 && r.coalesced_steps < r.steps - 3, "{} of {}", r.coalesced_steps, r.steps);
}

#[test]
fn a_refused_head_waits_through_the_stretch_and_enters_at_the_finish() {
    // 8 blocks of 4 (7 usable, 28 tokens): A (12 prompt, 8 out) takes 3 blocks and grows to
    // 5; B (16 prompt) needs 4 more and is refused while A decodes, until A finishes.
    let w = workload(&[((0..12).collect(), 8), ((100..116).collect(), 2)]);
    let r = both(&w, &[(0, 0.0), (1, 0.001)], &cfg(8, 1000, Some(8)), 1, RouterKind::RoundRobin, ALL);
    assert!(r.coalesced_steps > 0, "the stretch ran with the head refused");
    let (a, b) = (r.records.iter().find(|x| x.id == 0).unwrap(), r.records.iter().find(|x| x.id == 1).unwrap());
    assert!(b.first_scheduled_s >= a.last_token_s, "B entered when A finished: {a:?} {b:?}");
}

#[test]
fn tensorrt_llm_stretches_run_with_the_head_refused_for_room_to_completion() {
    // TensorRT-LLM's GUARANTEED_NO_EVICT: A (12 prompt, 8 out) takes 20 tokens' blocks (5 of
    // 4) at admission; B (16 prompt, 4 out) needs 5 more of the 7 usable and is refused until A
    // finishes. A's decodes allocate nothing, so they run as one stretch.
    let w = workload(&[((0..12).collect(), 8), ((100..116).collect(), 4)]);
    let mut c = cfg(8, 1000, Some(8));
    c.engine = crate::engine::EngineConfig {
        max_num_seqs: 8,
        max_num_batched_tokens: 1000,
        enable_chunked_prefill: false,
        ..crate::engine::EngineConfig::new(crate::engine::EngineVersion::Trtllm10)
    };
    let r = both(&w, &[(0, 0.0), (1, 0.001)], &c, 1, RouterKind::RoundRobin, ALL);
    assert!(r.coalesced_steps > 0, "the stretch ran with the head refused");
    let (a, b) = (r.records.iter().find(|x| x.id == 0).unwrap(), r.records.iter().find(|x| x.id == 1).unwrap());
    assert!(b.first_scheduled_s >= a.last_token_s, "B entered when A finished: {a:?} {b:?}");
}

#[test]
fn an_arrival_cuts_the_stretch_where_the_scheduler_would_see_it() {
    // B arrives while A decodes, with room to enter: the step after its arrival admits it.
    let w = workload(&[((0..10).collect(), 40), ((100..104).collect(), 3)]);
    let r = both(&w, &[(0, 0.0), (1, 0.1)], &cfg(8, 1000, None), 1, RouterKind::RoundRobin, ALL);
    assert!(r.coalesced_steps > 0);
    let b = r.records.iter().find(|x| x.id == 1).unwrap();
    let start = r.timeline.iter().map(|s| s.start_s).find(|&t| t >= 0.1).unwrap();
    assert!(close(b.first_scheduled_s, start), "{b:?}");
}

#[test]
fn a_sliding_window_decode_coalesces_around_its_block_growths() {
    // Prompt 10, 30 outputs, blocks of 4, window 6, alone: a prefill step and 29 decodes. Each
    // block boundary and each block the window passes is a growth the stretch performs itself
    // (`grow_quietly`); with a full group beside the window, and alone.
    let w = workload(&[((0..10).collect(), 30)]);
    for full_groups in [1, 0] {
        let mut c = cfg(8, 1000, Some(40));
        c.cache.hybrid = Some(crate::cache::hybrid::HybridLayout {
            full_groups,
            sliding_groups: 1,
            sliding_first: true,
            window: 6,
            retention: Some(0),
            admission_cap_blocks: (6 - 1 + 1000u32).div_ceil(4) + 1,
            mamba_groups: 0,
            mamba: None,
        });
        let r = both(&w, &[(0, 0.0)], &c, 1, RouterKind::RoundRobin, ALL);
        assert_eq!(r.steps, 30, "full groups {full_groups}");
        // The prefill and the first decode are the scheduler's; every other decode is formed
        // inside the stretch (the last left in flight), through every new block, every block
        // filled and every block the window passes.
        assert_eq!(r.coalesced_steps, 28, "full groups {full_groups}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Any workload (shared prefixes, so heads are refused with hits and preempted requests
    /// come back), pool, step budget, policy, router and fleet size: the same run with and
    /// without coalescing, every record, step, token and cache counter alike.
    #[test]
    fn coalescing_changes_nothing(
        reqs in proptest::collection::vec((0u32..4, 1u32..40, 1u32..60, 0.0f64..2.0, -1i32..2), 1..24),
        blocks in prop_oneof![Just(None), (6u64..40).prop_map(Some)],
        seqs in 1u32..6,
        tokens in 8u32..64,
        priority in any::<bool>(),
        n in 1usize..4,
        kind in 0usize..RouterKind::ALL.len(),
        concurrency in prop_oneof![Just(None), (1u32..4).prop_map(Some)],
        // vLLM's hybrid manager: (full groups, sliding groups, sliding first, window, retention).
        hybrid in prop_oneof![
            Just(None),
            (0u8..2, 1u8..3, any::<bool>(), 2u32..24, prop_oneof![Just(Some(0u32)), Just(None), Just(Some(8))])
                .prop_map(Some),
        ],
        // TensorRT-LLM's admission to completion instead of vLLM's (FCFS, one KV group).
        trtllm in any::<bool>(),
        // LMCache's CPU backend (chunks of 8 tokens), its local disk (chunks, bytes/s) and its
        // remote server (round trip, bytes/s).
        lmcache in prop_oneof![
            Just(None),
            (
                1u64..12,
                prop_oneof![Just(None), (1u64..16, 1e5f64..1e7).prop_map(Some)],
                prop_oneof![Just(None), (1e-5f64..1e-2, 1e5f64..1e7).prop_map(Some)],
            )
                .prop_map(Some),
        ],
        // vLLM's own CPU tier (chunks of one 4-token block; 1 ms a copy), when LMCache is not drawn.
        native in prop_oneof![Just(None), (1u64..48).prop_map(Some)],
    ) {
        let specs: Vec<(Vec<u32>, u32)> = reqs
            .iter()
            .enumerate()
            .map(|(i, &(prefix, len, out, _, _))| {
                let shared = (0..8 * prefix).map(|t| 10_000 + t);
                (shared.chain((0..len).map(|t| i as u32 * 100 + t)).collect(), out)
            })
            .collect();
        let mut doc = String::new();
        for ((ids, out), r) in specs.iter().zip(&reqs) {
            doc.push_str(&serde_json::json!({"prompt_ids": ids, "output_len": out, "priority": r.4}).to_string());
            doc.push('\n');
        }
        let file = crate::trace::parse(std::path::Path::new("t.jsonl"), doc.as_bytes(), &Default::default()).unwrap();
        let w = crate::workload::build(file, &Default::default()).unwrap();
        let mut sends: Vec<(u32, f64)> = reqs.iter().enumerate().map(|(i, r)| (i as u32, r.3)).collect();
        sends.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut c = cfg(seqs, tokens.max(seqs), blocks);
        c.max_concurrency = concurrency;
        if priority {
            c.engine.scheduling_policy = SchedulingPolicy::Priority;
        }
        if let Some((full, sliding, sliding_first, window, retention)) = hybrid {
            // With no full group, one sliding group alone (a model whose every layer slides).
            let sliding = if full == 0 { 1 } else { sliding };
            c.cache.hybrid = Some(crate::cache::hybrid::HybridLayout {
                full_groups: full,
                sliding_groups: sliding,
                sliding_first,
                window,
                retention,
                // `⌈min(W − 1 + in-flight tokens, max_model_len) / bs⌉ + 1`, block 4.
                admission_cap_blocks: (window - 1 + c.engine.max_num_batched_tokens).div_ceil(4) + 1,
                mamba_groups: 0,
                mamba: None,
            });
        }
        if trtllm && hybrid.is_none() && !priority {
            c.engine = crate::engine::EngineConfig {
                max_num_seqs: c.engine.max_num_seqs,
                max_num_batched_tokens: c.engine.max_num_batched_tokens,
                enable_chunked_prefill: false,
                ..crate::engine::EngineConfig::new(crate::engine::EngineVersion::Trtllm10)
            };
        }
        if let (Some((cpu, disk, remote)), None, false) = (lmcache, hybrid, trtllm) {
            let mut o = crate::engine::vllm_offload::lmcache::scenario_config(cpu);
            o.disk = disk.map(|(chunks, rate)| crate::engine::vllm_offload::DiskConfig {
                size_gib: 1.0,
                chunks,
                bytes_per_s: rate,
            });
            o.remote = remote
                .map(|(rtt_s, bytes_per_s)| crate::engine::vllm_offload::lmcache::remote::RemoteConfig { rtt_s, bytes_per_s });
            c.engine.offload = Some(o);
        }
        if let (None, Some(chunks), None, false) = (lmcache, native, hybrid, trtllm) {
            c.engine.offload = Some(super::offload_tests::tier(chunks));
        }
        let r = both(&w, &sends, &c, n, RouterKind::ALL[kind], Keep { steps: true, schedule: true, ..Keep::default() });
        prop_assert!(r.coalesced_steps <= r.steps);
    }
}
