//! SGLang scheduler tests: queue orders, and one hand-computed scenario per rule of
//! ENGINE_SPEC §3 that the golden schedules (tests/suite/golden_sglang.rs) do not exercise.

use super::*;
use crate::cache::radix::TreeCache;
use crate::cache::{CacheSpec, Policy, SglangCacheRules};
use crate::engine::{EngineKind, EngineVersion};
use crate::sim::{self, Keep, SimConfig, SimResult};
use crate::trace::{self, ReadOptions};
use crate::workload::{build, BuildOptions, Workload};

fn cfg(policy: SchedulePolicy) -> EngineConfig {
    EngineConfig {
        max_num_seqs: 64,
        max_num_batched_tokens: 16384,
        chunked_prefill_size: 8192,
        schedule_policy: policy,
        ..EngineConfig::new(crate::engine::EngineVersion::newest(EngineKind::Sglang))
    }
}

/// Waiting: x (shares prefix P2), a, b, c (share P1), z (no hit). dfs-weight visits the
/// heavier P1 subtree first, then P2, and the root's own request last; LPM sorts by hit.
#[test]
fn dfs_weight_and_lpm_orders() {
    let p1: Vec<u32> = (0..20).collect();
    let p2: Vec<u32> = (100..110).collect();
    let with = |p: &[u32], tail: u32| -> Vec<u32> { p.iter().copied().chain([tail, tail + 1]).collect() };
    let seqs =
        vec![p1.clone(), p2.clone(), with(&p2, 500), with(&p1, 600), with(&p1, 700), with(&p1, 800), vec![900, 901]];
    let store = Arc::new(TokenStore::from_seqs(&seqs));
    let mut cache = TreeCache::sglang(store.clone(), 1, None);
    for (id, len) in [(0u32, 20usize), (1, 10)] {
        cache.admit(id, id, len, usize::MAX).unwrap();
        cache.computed(id, len);
        cache.finish(id);
    }
    let reqs: Vec<ReqRt> = seqs.iter().enumerate().map(|(i, s)| ReqRt::new(i as u32, s.len() as u32, 1)).collect();
    let mut s = Sglang::new(cfg(SchedulePolicy::DfsWeight), store.clone());
    s.waiting = vec![2, 3, 4, 5, 6];
    assert_eq!(s.dfs_weight_order(&reqs, &cache), vec![3, 4, 5, 2, 6]);
    let mut lpm = Sglang::new(cfg(SchedulePolicy::Lpm), store);
    lpm.waiting = vec![6, 2, 3, 4, 5];
    lpm.order_waiting(&reqs, &mut cache);
    assert_eq!(lpm.waiting, vec![3, 4, 5, 2, 6]);
}

/// LPM's in-batch deprioritisation: of two uncached requests sharing ≥ 32 tokens, the
/// later one goes last, behind even requests without any hit.
#[test]
fn lpm_deprioritises_in_queue_duplicates() {
    let shared: Vec<u32> = (0..40).collect();
    let seqs = vec![
        shared.iter().copied().chain([1000]).collect::<Vec<u32>>(),
        vec![2000, 2001],
        shared.iter().copied().chain([3000]).collect(),
    ];
    let store = Arc::new(TokenStore::from_seqs(&seqs));
    let mut cache = TreeCache::sglang(store.clone(), 1, None);
    let reqs: Vec<ReqRt> = seqs.iter().enumerate().map(|(i, s)| ReqRt::new(i as u32, s.len() as u32, 1)).collect();
    let mut lpm = Sglang::new(cfg(SchedulePolicy::Lpm), store);
    lpm.waiting = vec![0, 2, 1];
    lpm.order_waiting(&reqs, &mut cache);
    assert_eq!(lpm.waiting, vec![0, 1, 2]);
}

/// A workload of (prompt token ids, output length) requests.
fn workload(reqs: &[(Vec<u32>, u32)]) -> Workload {
    let with: Vec<_> = reqs.iter().map(|(ids, out)| (ids.clone(), *out, None)).collect();
    workload_with_priorities(&with)
}

/// Distinct tokens `[base, base + n)`.
fn toks(base: u32, n: u32) -> Vec<u32> {
    (base..base + n).collect()
}

/// Runs `sends` on SGLang with bundle `v`, a pool of `pool` tokens, chunk `chunk`, prefill cap
/// `max_prefill`.
fn run(w: &Workload, sends: &[(u32, f64)], v: EngineVersion, pool: u64, chunk: u32, max_prefill: u32) -> SimResult {
    let mut engine = cfg(SchedulePolicy::Fcfs);
    engine.version = v;
    engine.rules = v.rules();
    engine.chunked_prefill_size = chunk;
    engine.max_prefill_tokens = max_prefill;
    simulate(w, sends, engine, pool)
}

/// Runs `sends` under `engine` with a radix pool of `pool` tokens (page 1), every step 10 ms,
/// keeping the schedule.
fn simulate(w: &Workload, sends: &[(u32, f64)], engine: EngineConfig, pool: u64) -> SimResult {
    let c = SimConfig {
        engine,
        cache: CacheSpec {
            policy: Policy::Radix,
            block_size: None,
            page_size: Some(1),
            capacity_tokens: Some(pool),
            hybrid: None,
            sglang_pool: None,
        },
        max_concurrency: None,
        request_overhead_s: 0.0,
        limits: None,
    };
    let cost =
        crate::cost::Affine { base_s: 0.01, per_prefill_token_s: 0.0, per_decode_seq_s: 0.0, per_ctx_token_s: 0.0 };
    sim::run(w, sends, &c, &cost, Keep { schedule: true, ..Keep::default() })
}

fn retractions(r: &SimResult) -> usize {
    r.schedule.iter().map(|s| s.preempted.len()).sum()
}

/// `_select_prefill_admission` (0.5): with chunking on, a prompt over the remaining input budget
/// is cut to the chunk. Chunk 512, max_prefill_tokens 600: A (300) is admitted whole, leaving 300
/// input and 212 chunk tokens; B (400 ≥ 300) gets 212 tokens in 0.5, ends the batch in 0.4.
#[test]
fn a_prompt_over_the_input_budget_is_cut_to_the_chunk() {
    let w = workload(&[(toks(0, 300), 2), (toks(1000, 400), 2)]);
    let sends = [(0, 0.0), (1, 0.0)];
    let new = run(&w, &sends, EngineVersion::Sglang05, 100_000, 512, 600);
    assert_eq!(new.schedule[0].items, vec![(0, 300, 0), (1, 212, 0)]);
    let old = run(&w, &sends, EngineVersion::Sglang051, 100_000, 512, 600);
    assert_eq!(old.schedule[0].items, vec![(0, 300, 0)]);
    assert_eq!(old.schedule[1].items, vec![(1, 400, 0)], "B alone, whole, in the next prefill");
}

/// `prefill_only_one_req` (0.4.3.post2 under EAGLE/NEXTN, `Scheduler.get_new_batch_prefill`):
/// each prefill batch admits one request, and prefills run before any decode while one can be
/// formed. A, B, C (prompts of 10, 2 outputs) at 0: three one-request prefills, then one decode
/// of the three; without the rule one prefill of all three, then the decode.
#[test]
fn one_request_per_prefill_batch() {
    let w = workload(&[(toks(0, 10), 2), (toks(100, 10), 2), (toks(200, 10), 2)]);
    let sends = [(0, 0.0), (1, 0.0), (2, 0.0)];
    let one = EngineConfig { prefill_only_one_req: true, ..cfg(SchedulePolicy::Fcfs) };
    let r = simulate(&w, &sends, one, 100_000);
    let batches: Vec<Vec<u32>> = r.schedule.iter().map(|s| s.items.iter().map(|i| i.0).collect()).collect();
    assert_eq!(batches, [vec![0], vec![1], vec![2], vec![0, 1, 2]]);
    let all = simulate(&w, &sends, cfg(SchedulePolicy::Fcfs), 100_000);
    let batches: Vec<Vec<u32>> = all.schedule.iter().map(|s| s.items.iter().map(|i| i.0).collect()).collect();
    assert_eq!(batches, [vec![0, 1, 2], vec![0, 1, 2]]);
}

/// `PrefillAdder._lock_node` (0.4.10 and 0.5.23): a waiting request is checked with its matched
/// prefix pinned, so its cached tokens no longer count as room. A (40 prompt tokens, 1 output)
/// finishes and leaves 40 evictable tokens in an 80-token pool; B = A's prompt + 30 tokens with
/// `out` outputs is admitted only while 30 + out (+ 1 page in 0.5) < 80 − 40 pinned. Unpinned,
/// every B would fit the 80 free-or-evictable tokens.
#[test]
fn a_matched_prefix_is_pinned_while_its_request_is_checked() {
    let a = toks(0, 40);
    let b: Vec<u32> = a.iter().copied().chain(toks(500, 30)).collect();
    for (v, out, admitted) in [
        (EngineVersion::Sglang05, 8, true),
        (EngineVersion::Sglang05, 9, false),
        (EngineVersion::Sglang051, 9, true),
        (EngineVersion::Sglang051, 10, false),
    ] {
        let w = workload(&[(a.clone(), 1), (b.clone(), out)]);
        let r = run(&w, &[(0, 0.0), (1, 1.0)], v, 80, 512, 16384);
        assert_eq!(r.records.len() == 2, admitted, "{v}, {out} outputs");
        if admitted {
            assert_eq!(r.schedule[1].items, vec![(1, 30, 40)], "{v}: admitted with its 40-token hit");
        } else {
            assert_eq!(r.failed, 1, "{v}: never admitted (SGLang would wait for ever)");
        }
    }
}

/// A cache of `pool` slots with B = prefix P (10 tokens, cached and pinned by B only) + 10
/// private, and A = 20 private tokens (and more requests of 20 private tokens if `extra`);
/// every slot used. B has the fewest outputs.
fn full_pool(extra: u32, rules: SglangCacheRules) -> (Sglang, TreeCache, Vec<ReqRt>) {
    let mut seqs: Vec<Vec<u32>> = vec![toks(0, 20), toks(100, 20)];
    for i in 0..extra {
        seqs.push(toks(1000 + 100 * i, 20));
    }
    let store = Arc::new(TokenStore::from_seqs(&seqs));
    let pool = 40 + 20 * extra as u64;
    let mut cache = TreeCache::sglang(store.clone(), 1, Some(pool));
    cache.follow_sglang(rules);
    let mut reqs = Vec::new();
    for (id, s) in seqs.iter().enumerate() {
        let id = id as ReqId;
        let known = if id == 0 { 10 } else { 20 };
        cache.admit(id, id, known, usize::MAX).unwrap();
        cache.computed(id, known);
        assert!(cache.grow(id, 20));
        let mut r = ReqRt::new(id, s.len() as u32 - 5, 50);
        r.num_tokens = 20;
        r.num_computed = 20;
        r.generated = if id == 0 { 1 } else { 5 + id };
        reqs.push(r);
    }
    assert_eq!(
        cache.usage(),
        crate::cache::Usage { used_tokens: pool, evictable_tokens: 0, capacity_tokens: Some(pool) }
    );
    (Sglang::new(cfg(SchedulePolicy::Fcfs), store), cache, reqs)
}

/// `release_req` (0.4.10 and 0.5.23): after a retraction the tree evicts towards
/// `remaining × SGLANG_RETRACT_DECODE_STEPS` free tokens. Retracting B frees its 10 private
/// tokens and unpins P; then 20 free tokens are wanted for A, so P (10 tokens) is evicted at once.
#[test]
fn a_retraction_evicts_towards_twenty_tokens_per_remaining_request() {
    let (mut s, mut cache, mut reqs) = full_pool(0, EngineVersion::Sglang05.rules().sglang_cache());
    s.running = vec![1, 0];
    assert_eq!(s.make_decode_room(&mut reqs, &mut cache), 1);
    assert_eq!((s.running.clone(), s.waiting.clone()), (vec![1], vec![0]));
    let u = cache.usage();
    assert_eq!((u.used_tokens, u.evictable_tokens), (20, 0), "P was evicted right after B's retraction");
    // new_token_ratio = (A's 6 outputs + 20) / (50 + 1).
    assert!((s.ratio - 26.0 / 51.0).abs() < 1e-12, "{}", s.ratio);
}

/// `retract_decode`: 0.5.23 retracts until one more decode step fits; 0.4.10 until 20 tokens per
/// remaining request are free. Three requests fill a 60-token pool: 0.5 retracts B only (20 free
/// for 2 requests), 0.4 retracts B and then the next fewest-outputs request (20 < 2 × 20).
#[test]
fn retraction_stops_when_a_decode_step_fits_in_0_5() {
    let (mut s, mut cache, mut reqs) = full_pool(1, EngineVersion::Sglang05.rules().sglang_cache());
    s.running = vec![0, 1, 2];
    assert_eq!(s.make_decode_room(&mut reqs, &mut cache), 1);
    // Kept in retraction order: most outputs first.
    assert_eq!(s.running, vec![2, 1]);
    let (mut s, mut cache, mut reqs) = full_pool(1, EngineVersion::Sglang051.rules().sglang_cache());
    s.cfg.rules = EngineVersion::Sglang051.rules();
    s.running = vec![0, 1, 2];
    assert_eq!(s.make_decode_room(&mut reqs, &mut cache), 2);
    assert_eq!((s.running.clone(), s.waiting.clone()), (vec![2], vec![0, 1]));
    // 0.4.10's ratio: (7 outputs + 20) / 50.
    assert!((s.ratio - 27.0 / 50.0).abs() < 1e-12, "{}", s.ratio);
}

/// `RadixCache.checkpoint` (0.5.23) splits a finished request's path at its prompt's end: a
/// shortfall eviction then takes only the outputs' node and keeps the prompt cached. A request
/// with a 10-token prompt and 5 outputs leaves 14 tokens; 6 of a 20-token pool are free; making
/// 9 free evicts the 4 output tokens (0.5) or the whole 14-token node (0.5.1).
#[test]
fn eviction_takes_the_outputs_before_the_prompt() {
    for (v, evicted, prompt_kept) in [(EngineVersion::Sglang05, 4, 10), (EngineVersion::Sglang051, 14, 0)] {
        let store = Arc::new(TokenStore::from_seqs(&[toks(0, 15), toks(0, 12)]));
        let mut cache = TreeCache::sglang(store, 1, Some(20));
        cache.follow_sglang(v.rules().sglang_cache());
        cache.admit(0, 0, 10, usize::MAX).unwrap();
        cache.computed(0, 10);
        assert!(cache.grow(0, 14));
        cache.computed(0, 14);
        cache.finish(0);
        assert_eq!(cache.usage().evictable_tokens, 14);
        assert!(cache.ensure_free(9));
        assert_eq!(cache.stats().evicted_tokens, evicted, "{v}");
        assert_eq!(cache.peek(1, 12), prompt_kept, "{v}");
        cache.check_invariants();
    }
}

/// SGLang's insert at a request's finish walks the key even when it adds nothing
/// (`RadixCache.checkpoint` from `release_kv_cache`, 0.5.23; `cache_finished_req`, 0.4.10), so
/// the path counts as used at the finish. Pages of 4 tokens, two 6-token prompts: each caches
/// its first page at prefill, A before B. B finishes at once, A after one more token, both
/// before filling the page their prompt ends in. A third request takes the free pages; of the
/// two cached pages, the one evicted for a page more is then B's: A's was refreshed at its
/// later finish.
#[test]
fn a_finish_inside_the_prompt_page_refreshes_the_path() {
    for v in [EngineVersion::Sglang05, EngineVersion::Sglang051] {
        let store = Arc::new(TokenStore::from_seqs(&[toks(0, 8), toks(100, 8), toks(200, 8)]));
        let mut cache = TreeCache::sglang(store, 4, Some(16));
        cache.follow_sglang(v.rules().sglang_cache());
        for id in [0, 1] {
            cache.admit(id, id, 6, usize::MAX).unwrap();
            cache.computed(id, 6);
        }
        cache.finish(1);
        assert!(cache.grow(0, 7));
        cache.computed(0, 7);
        cache.finish(0);
        assert_eq!(cache.usage().evictable_tokens, 8);
        cache.admit(2, 2, 6, usize::MAX).unwrap();
        assert!(cache.ensure_free(4));
        assert_eq!(cache.stats().evicted_tokens, 4, "{v}");
        assert_eq!((cache.peek(0, 6), cache.peek(1, 6)), (4, 0), "{v}");
        cache.check_invariants();
    }
}

/// `Scheduler.on_idle` (0.5.23; 0.4.10 `self_check_during_idle`) resets new_token_ratio. Burst
/// one, a 700-output request, decays the ratio to its floor (0.098). Burst two, ten requests of
/// 100 prompt tokens and 10 outputs in a 1030-token pool, comes after an idle gap. The first pass
/// admits nine (9 × 110 = 990; a tenth would need 110 of the 40 left). In the second pass the
/// nine reserve 9 × 9 × ratio of their outputs: at 0.7 that leaves 73 < 110, at the floor 122 ≥
/// 110, and the tenth would over-commit the pool. With SGLang 0.5.1's ratio-scaled reservations:
/// no retraction with the reset; retractions without it (0.5 reserves ignore-EOS outputs fully).
#[test]
fn new_token_ratio_resets_when_idle() {
    let mut reqs = vec![(toks(0, 10), 700)];
    for i in 0..10 {
        reqs.push((toks(10_000 + 1000 * i, 100), 10));
    }
    let w = workload(&reqs);
    let sends: Vec<(u32, f64)> = (0..11).map(|i| (i, if i == 0 { 0.0 } else { 100.0 })).collect();
    let r = run(&w, &sends, EngineVersion::Sglang051, 1030, 0, 16384);
    assert_eq!(r.records.len(), 11);
    assert_eq!(retractions(&r), 0);
    let burst2: Vec<_> = r.schedule.iter().skip_while(|s| s.items.iter().all(|&(id, ..)| id == 0)).collect();
    assert_eq!(burst2[0].items.len(), 9, "first pass: nine admitted");
    assert!(burst2[1].items.iter().all(|&(_, n, _)| n == 1), "second pass admits none: a decode step");
}

/// A workload of (prompt token ids, output length, priority) requests.
fn workload_with_priorities(reqs: &[(Vec<u32>, u32, Option<i32>)]) -> Workload {
    let mut doc = String::new();
    for (ids, out, p) in reqs {
        let mut rec = serde_json::json!({"prompt_ids": ids, "output_len": out});
        if let Some(p) = p {
            rec["priority"] = (*p).into();
        }
        doc.push_str(&rec.to_string());
        doc.push('\n');
    }
    let file = trace::parse(std::path::Path::new("t.jsonl"), doc.as_bytes(), &ReadOptions::default()).unwrap();
    build(file, &BuildOptions::default()).unwrap()
}

/// Priority scheduling as SGLang's defaults set it: higher first, preemption above 10.
fn prio() -> priority::SglangPriority {
    priority::SglangPriority {
        low_values_first: false,
        preemption_threshold: Some(priority::DEFAULT_PREEMPTION_THRESHOLD),
        default_value: None,
        retract_by_priority: false,
    }
}

/// Runs `sends` on SGLang 0.5.23 with at most `max_running` running requests, a large pool, and
/// every step 10 ms.
fn run_prio(w: &Workload, sends: &[(u32, f64)], max_running: u32, p: Option<priority::SglangPriority>) -> SimResult {
    let mut engine = cfg(SchedulePolicy::Fcfs);
    engine.max_num_seqs = max_running;
    engine.sglang_priority = p;
    simulate(w, sends, engine, 100_000)
}

fn record(r: &SimResult, id: u32) -> &crate::metrics::RequestRecord {
    r.records.iter().find(|x| x.id == id).expect("a completed request")
}

/// `PrefillAdder.preempt_to_schedule` (0.5.23). Two running slots hold A and B (priority 0, 10
/// outputs each, prefilled together at 0 s); C (priority 20) arrives at 0.025 s. At the 0.03 s
/// pass the slots are full: C beats both by 20 > 10; the victim is the least important, the
/// later queued among equals: B. One victim covers C's demand, so A keeps running; C is
/// prefilled at once (first token at 0.04 s) and B re-queued: at the next pass B (priority 0)
/// beats no one, and waits for a slot (A's last token at 0.11 s, one step late for C's prefill;
/// B is prefilled again in the pass at 0.11 s, its prompt a cache hit). With priority 10
/// (not above the threshold) or preemption off, C waits for A's finish instead.
#[test]
fn a_more_important_arrival_preempts_the_latest_queued_of_the_least_important() {
    let w = workload_with_priorities(&[
        (toks(0, 10), 10, Some(0)),
        (toks(100, 10), 10, Some(0)),
        (toks(200, 10), 10, Some(20)),
    ]);
    let sends = [(0, 0.0), (1, 0.0), (2, 0.025)];
    let r = run_prio(&w, &sends, 2, Some(prio()));
    // The engine is busy from 0 s on, so step k starts at k × 10 ms.
    assert_eq!(r.schedule[3].items, vec![(2, 10, 0)], "C prefilled in the 0.03 s pass");
    assert_eq!(r.schedule[3].preempted, vec![1]);
    assert!((record(&r, 2).first_token_s - 0.04).abs() < 1e-9);
    assert_eq!((record(&r, 0).preemptions, record(&r, 1).preemptions, record(&r, 2).preemptions), (0, 1, 0));
    // A: prefill at 0, nine decodes to 0.10 s, with C's prefill in between: its last token at 0.11 s.
    assert!((record(&r, 0).last_token_s - 0.11).abs() < 1e-9, "{}", record(&r, 0).last_token_s);
    let b_again = r.schedule.iter().skip(1).position(|s| s.items.iter().any(|&(id, n, _)| id == 1 && n > 1));
    assert_eq!(b_again, Some(10), "B re-prefilled in step 11, when A leaves");
    assert_eq!(r.schedule[11].items, vec![(1, 3, 10)], "its 10-token prompt a hit, its 3 outputs computed again");
    for p in [Some(priority::SglangPriority { preemption_threshold: None, ..prio() }), None] {
        let r = run_prio(&w, &sends, 2, p);
        assert_eq!(r.records.iter().map(|x| x.preemptions).sum::<u32>(), 0);
        // A and B end at 0.10 s; C is prefilled then.
        assert!((record(&r, 2).first_token_s - 0.11).abs() < 1e-9, "C waits for a slot");
    }
    let w10 = workload_with_priorities(&[
        (toks(0, 10), 10, Some(0)),
        (toks(100, 10), 10, Some(0)),
        (toks(200, 10), 10, Some(10)),
    ]);
    let r = run_prio(&w10, &sends, 2, Some(prio()));
    assert_eq!(r.records.iter().map(|x| x.preemptions).sum::<u32>(), 0, "a difference of 10 is not above 10");
}

/// `_sort_by_priority_and_fcfs`: one slot; A runs; B (priority 0) and C (priority 5) wait (5 is
/// not enough to preempt). At A's finish C goes first by default, B with low values first (and
/// B, its elder, without priority scheduling).
#[test]
fn the_waiting_queue_is_served_by_priority_then_by_entry() {
    let w = workload_with_priorities(&[
        (toks(0, 10), 5, Some(0)),
        (toks(100, 10), 5, Some(0)),
        (toks(200, 10), 5, Some(5)),
    ]);
    let sends = [(0, 0.0), (1, 0.001), (2, 0.002)];
    let order = |p| {
        let r = run_prio(&w, &sends, 1, p);
        assert_eq!(r.records.iter().map(|x| x.preemptions).sum::<u32>(), 0);
        let mut ids: Vec<u32> = vec![1, 2];
        ids.sort_by(|a, b| record(&r, *a).first_token_s.total_cmp(&record(&r, *b).first_token_s));
        ids
    };
    assert_eq!(order(Some(prio())), vec![2, 1]);
    assert_eq!(order(Some(priority::SglangPriority { low_values_first: true, ..prio() })), vec![1, 2]);
    assert_eq!(order(None), vec![1, 2]);
}

/// `_set_or_validate_priority`: a request sent without a priority is the least important there
/// is, so a priority-0 arrival preempts it (0 − (−2⁶³) > 10) — unless `--default-priority-value`
/// gives it 0.
#[test]
fn a_request_without_priority_is_preempted_by_any() {
    let w = workload_with_priorities(&[(toks(0, 10), 10, None), (toks(200, 10), 10, Some(0))]);
    let sends = [(0, 0.0), (1, 0.025)];
    let r = run_prio(&w, &sends, 1, Some(prio()));
    assert_eq!((record(&r, 0).preemptions, record(&r, 1).preemptions), (1, 0));
    let r = run_prio(&w, &sends, 1, Some(priority::SglangPriority { default_value: Some(0), ..prio() }));
    assert_eq!(record(&r, 0).preemptions, 0);
}

/// `--retraction-policy priority` (`_get_decode_retraction_order`): the least important running
/// request is retracted first whatever its outputs. In the full pool of
/// `a_retraction_evicts_towards_twenty_tokens_per_remaining_request`, B (1 output) is the length
/// rule's victim; with B at priority 9 and A at 1, A goes instead.
#[test]
fn retraction_by_priority_takes_the_least_important() {
    let (_, mut cache, mut reqs) = full_pool(0, EngineVersion::Sglang05.rules().sglang_cache());
    let mut engine = cfg(SchedulePolicy::Fcfs);
    engine.sglang_priority = Some(priority::SglangPriority { retract_by_priority: true, ..prio() });
    let mut s = Sglang::new(engine, Arc::new(TokenStore::from_seqs(&[toks(0, 20), toks(100, 20)])));
    s.enqueue(0, Some(9), 0.0);
    s.enqueue(1, Some(1), 0.0);
    s.waiting.clear();
    s.running = vec![1, 0];
    assert_eq!(s.make_decode_room(&mut reqs, &mut cache), 1);
    assert_eq!((s.running.clone(), s.waiting.clone()), (vec![0], vec![1]));
}

/// Runs random requests — (prompt tokens, outputs, priority, send time) — under `engine` with a
/// pool of `pool` tokens and 10 ms steps.
fn run_random(reqs: &[(u32, u32, Option<i32>, f64)], engine: EngineConfig, pool: u64) -> SimResult {
    let specs: Vec<(Vec<u32>, u32, Option<i32>)> = reqs
        .iter()
        .enumerate()
        .map(|(i, &(len, out, p, _))| {
            // Every third request shares an 8-token prefix, so re-prefills and retractions meet hits.
            let shared = (0..if i % 3 == 0 { 8 } else { 0 }).map(|t| 50_000 + t);
            (shared.chain((0..len).map(|t| i as u32 * 1000 + t)).collect(), out, p)
        })
        .collect();
    let w = workload_with_priorities(&specs);
    let mut sends: Vec<(u32, f64)> = reqs.iter().enumerate().map(|(i, r)| (i as u32, r.3)).collect();
    sends.sort_by(|a, b| a.1.total_cmp(&b.1));
    simulate(&w, &sends, engine, pool)
}

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any requests, priorities (some without), pool, slot count, threshold, order and queue
    /// bound: every request completes with all its outputs (preemptions included) or fails for
    /// the bound, and the run repeats exactly. With preemption off and one priority for all, the schedule is FCFS's (or
    /// LOF's) step for step: the sort by (priority, entry) is then the queue's own order.
    #[test]
    fn priority_scheduling_loses_nothing_and_reduces_to_the_plain_order(
        reqs in proptest::collection::vec(
            (1u32..40, 1u32..30, prop_oneof![Just(None), (-3i32..30).prop_map(Some)], 0.0f64..0.3), 1..20),
        pool in 120u64..600,
        slots in 1u32..5,
        threshold in -2i64..15,
        low_first in any::<bool>(),
        by_priority in any::<bool>(),
        lof in any::<bool>(),
        queue in prop_oneof![Just(None), (1u32..6).prop_map(Some)],
    ) {
        let policy = if lof { SchedulePolicy::Lof } else { SchedulePolicy::Fcfs };
        let mut engine =
            EngineConfig { max_num_seqs: slots, chunked_prefill_size: 64, max_queued_requests: queue, ..cfg(policy) };
        engine.sglang_priority = Some(priority::SglangPriority {
            low_values_first: low_first,
            preemption_threshold: Some(threshold),
            default_value: None,
            retract_by_priority: by_priority,
        });
        let r = run_random(&reqs, engine, pool);
        prop_assert_eq!(r.records.len() as u64 + r.failed, reqs.len() as u64);
        prop_assert!(queue.is_some() || r.failed == 0);
        for rec in &r.records {
            prop_assert_eq!(rec.output_tokens, reqs[rec.id as usize].1);
        }
        let again = run_random(&reqs, engine, pool);
        prop_assert_eq!(format!("{:?}", r.records), format!("{:?}", again.records));
        prop_assert_eq!(&r.schedule, &again.schedule);

        let same: Vec<_> = reqs.iter().map(|&(l, o, _, t)| (l, o, Some(7), t)).collect();
        let mut quiet = engine;
        quiet.sglang_priority = Some(priority::SglangPriority { preemption_threshold: None, retract_by_priority: false, ..engine.sglang_priority.unwrap() });
        let plain = EngineConfig { sglang_priority: None, ..engine };
        let (a, b) = (run_random(&same, quiet, pool), run_random(&same, plain, pool));
        prop_assert_eq!(&a.schedule, &b.schedule);
        prop_assert_eq!(format!("{:?}", a.records), format!("{:?}", b.records));
    }
}

/// `_abort_on_queued_limit` (`--max-queued-requests 1`): one slot, A runs, B waits; C finds the
/// queue full and is refused (503). Under priority scheduling a more important C (priority 5
/// over B's 0; no threshold here) takes B's place instead, and B is the one refused; an equally
/// important C is refused.
#[test]
fn a_full_waiting_queue_refuses_the_arrival_or_a_less_important_waiting_request() {
    let reqs = |c: i32| {
        workload_with_priorities(&[(toks(0, 10), 5, Some(0)), (toks(100, 10), 5, Some(0)), (toks(200, 10), 5, Some(c))])
    };
    let sends = [(0, 0.0), (1, 0.001), (2, 0.002)];
    let run_q = |w: &Workload, p: Option<priority::SglangPriority>| {
        let mut engine = cfg(SchedulePolicy::Fcfs);
        engine.max_num_seqs = 1;
        engine.sglang_priority = p;
        engine.max_queued_requests = Some(1);
        simulate(w, &sends, engine, 100_000)
    };
    let completed = |r: &SimResult| {
        let mut ids: Vec<u32> = r.records.iter().map(|x| x.id).collect();
        ids.sort();
        ids
    };
    let plain = run_q(&reqs(5), None);
    assert_eq!(
        (completed(&plain), plain.failures.keys().copied().collect::<Vec<_>>()),
        (vec![0, 1], vec![FailReason::QueueFull])
    );
    let by_priority = run_q(&reqs(5), Some(prio()));
    assert_eq!(completed(&by_priority), vec![0, 2]);
    assert_eq!(by_priority.failures.keys().copied().collect::<Vec<_>>(), vec![FailReason::PriorityAbort]);
    let equal = run_q(&reqs(0), Some(prio()));
    assert_eq!(completed(&equal), vec![0, 1], "an equal priority does not displace");
}

/// `_set_or_validate_priority` under `--abort-on-priority-when-disabled` (0.5.4 on): without
/// priority scheduling a request sent with a priority (even 0) fails at once with SGLang's 503;
/// one sent without is served.
#[test]
fn a_priority_is_refused_when_priority_scheduling_is_off_and_the_server_says_so() {
    let w = workload_with_priorities(&[(toks(0, 10), 3, Some(0)), (toks(100, 10), 3, None)]);
    let mut engine = cfg(SchedulePolicy::Fcfs);
    engine.abort_on_priority_when_disabled = true;
    let r = simulate(&w, &[(0, 0.0), (1, 0.0)], engine, 100_000);
    assert_eq!(r.records.iter().map(|x| x.id).collect::<Vec<_>>(), vec![1]);
    let (n, message) = &r.failures[&FailReason::PriorityDisabled];
    assert_eq!((*n, message.as_str()), (1, priority::PRIORITY_DISABLED));
}
