//! vLLM 0.33.0's hybrid manager step by step: block size 16, one sliding-window group (W = 32,
//! so a sliding hit needs 2 blocks) as group 0 and one full-attention group as group 1, the
//! default retention. Every scenario was run through vLLM 0.33.0's own `Scheduler`,
//! `KVCacheManager` and `HybridKVCacheCoordinator` on CPU, which gave the tables and queues
//! asserted here. A step is what vLLM's scheduler does: `grow` to the step's tokens (after the
//! window moved past what the request computed), `computed` at its end.

use super::*;

const SW: usize = 0;
const F: usize = 1;

fn range(a: u32, b: u32) -> Vec<u32> {
    (a..b).collect()
}

fn layout(cap: u32) -> HybridLayout {
    HybridLayout {
        full_groups: 1,
        sliding_groups: 1,
        sliding_first: true,
        window: 32,
        retention: Some(0),
        admission_cap_blocks: cap,
        mamba_groups: 0,
        mamba: None,
    }
}

fn cache(seqs: &[Vec<u32>], num_blocks: u32, cap: u32) -> HybridCache {
    HybridCache::new(Arc::new(TokenStore::from_seqs(seqs)), 16, Some(num_blocks), layout(cap))
}

/// A's prompt (100 tokens) and three outputs.
fn prompt_a() -> Vec<u32> {
    range(1000, 1100)
}

/// The admission cap of `max_num_batched_tokens` = 8192, `max_model_len` = 4096.
const CAP: u32 = 257;

#[test]
fn a_resend_hits_the_retained_window_at_the_replay_boundary() {
    let a = [prompt_a(), range(5000, 5003)].concat();
    let b = [prompt_a(), range(6000, 6001)].concat();
    let mut c = cache(&[a, b], 32, CAP);
    // Step 0: 7 + 7 blocks; full blocks 0–5 cached; of the window's, only the two below the
    // replay boundary ⌊99 / 16⌋ = 6.
    let got = c.admit_reserving(0, 0, 100, 8192, 100).unwrap();
    assert_eq!((got.hit_tokens, got.allocated_tokens), (0, 100));
    assert_eq!(c.block_table(0, SW).unwrap(), &range(1, 8)[..]);
    assert_eq!(c.block_table(0, F).unwrap(), &range(8, 15)[..]);
    let cached: Vec<u32> = (1..15).filter(|&b| c.is_cached(b)).collect();
    assert_eq!(cached, vec![5, 6, 8, 9, 10, 11, 12, 13]);
    c.computed(0, 100);
    c.check_invariants();
    // Step 1: the window passed slots 0–3 (69 tokens skipped): released right to left, unhashed,
    // to the queue's head.
    assert!(c.grow(0, 101));
    assert_eq!(c.block_table(0, SW).unwrap(), &[0, 0, 0, 0, 5, 6, 7]);
    assert_eq!(c.free_queue(), [vec![4, 3, 2, 1], range(15, 32)].concat());
    c.computed(0, 101);
    assert!(c.grow(0, 102));
    c.computed(0, 102);
    c.finish(0);
    // Group 0 first, each last block first: unhashed to the head, hashed to the tail.
    let want = [vec![14, 7, 4, 3, 2, 1], range(15, 32), vec![6, 5, 13, 12, 11, 10, 9, 8]].concat();
    assert_eq!(c.free_queue(), want);
    c.check_invariants();
    // B resends the prompt: 96 tokens hit in both groups.
    assert_eq!(c.peek(1, 100), 96);
    let got = c.admit_reserving(1, 1, 100, 8192, 100).unwrap();
    assert_eq!((got.hit_tokens, got.allocated_tokens), (96, 100));
    assert_eq!(c.block_table(1, SW).unwrap(), &[0, 0, 0, 0, 5, 6, 14]);
    assert_eq!(c.block_table(1, F).unwrap(), &[8, 9, 10, 11, 12, 13, 7]);
    c.check_invariants();
}

#[test]
fn a_sibling_diverging_inside_the_prompt_hits_nothing_and_pins_the_junction_for_the_next() {
    let a = [prompt_a(), range(5000, 5001)].concat();
    let b = [range(1000, 1090), range(7000, 7060), range(5100, 5101)].concat();
    let c2 = [range(1000, 1090), range(8000, 8060), range(5200, 5201)].concat();
    let mut c = cache(&[a, b, c2], 48, CAP);
    c.admit_reserving(0, 0, 100, 8192, 100).unwrap();
    c.computed(0, 100);
    c.finish(0);
    let want = [vec![14, 7, 4, 3, 2, 1], range(15, 48), vec![6, 5, 13, 12, 11, 10, 9, 8]].concat();
    assert_eq!(c.free_queue(), want);
    // B: the full groups hit 80 tokens, the window's block 3 was never cached: no hit; the
    // junction 80 makes B cache its own window below it (slots 3, 4) beside the boundary's (7, 8).
    let got = c.admit_reserving(1, 1, 150, 8192, 150).unwrap();
    assert_eq!(got.hit_tokens, 0);
    assert_eq!(c.block_table(1, SW).unwrap(), &[14, 7, 4, 3, 2, 1, 15, 16, 17, 18]);
    let kept: Vec<u32> = [14, 7, 4, 3, 2, 1, 15, 16, 17, 18].into_iter().filter(|&b| c.is_cached(b)).collect();
    assert_eq!(kept, vec![3, 2, 16, 17]);
    assert_eq!(c.block_table(1, F).unwrap(), &range(19, 29)[..]);
    c.computed(1, 150);
    c.finish(1);
    let want = [
        vec![28, 18, 15, 1, 4, 7, 14],
        range(29, 48),
        vec![6, 5, 13, 12, 11, 10, 9, 8, 17, 16, 2, 3],
        (19..28).rev().collect(),
    ]
    .concat();
    assert_eq!(c.free_queue(), want);
    // C, the next sibling, hits 80: its window's last two blocks are A's (the earliest
    // inserted carrier of the key) and B's.
    let got = c.admit_reserving(2, 2, 150, 8192, 150).unwrap();
    assert_eq!(got.hit_tokens, 80);
    assert_eq!(c.block_table(2, SW).unwrap(), &[0, 0, 0, 3, 5, 28, 18, 15, 1, 4]);
    assert_eq!(c.block_table(2, F).unwrap(), &[8, 9, 10, 11, 12, 7, 14, 29, 30, 31]);
    c.check_invariants();
}

#[test]
fn chunked_prefill_releases_the_window_behind_each_chunk_to_the_head() {
    let a = [prompt_a(), range(5000, 5003)].concat();
    let mut c = cache(&[a], 32, 6);
    c.admit_reserving(0, 0, 100, 48, 100).unwrap();
    assert_eq!(c.block_table(0, SW).unwrap(), &[1, 2, 3]);
    assert_eq!(c.block_table(0, F).unwrap(), &[4, 5, 6]);
    c.computed(0, 48);
    assert!(c.grow(0, 96));
    assert_eq!(c.block_table(0, SW).unwrap(), &[0, 2, 3, 1, 7, 8]);
    assert_eq!(c.block_table(0, F).unwrap(), &[4, 5, 6, 9, 10, 11]);
    assert!(!c.is_cached(1) && c.is_cached(7) && c.is_cached(8));
    assert_eq!(c.free_queue(), range(12, 32));
    c.computed(0, 96);
    // Slots 3, 2, 1 go (the walk stops at the null slot 0), then one block each.
    assert!(c.grow(0, 100));
    assert_eq!(c.block_table(0, SW).unwrap(), &[0, 0, 0, 0, 7, 8, 1]);
    assert_eq!(c.block_table(0, F).unwrap(), &[4, 5, 6, 9, 10, 11, 3]);
    assert_eq!(c.free_queue(), [vec![2], range(12, 32)].concat());
    c.check_invariants();
}

#[test]
fn the_admission_gate_caps_the_window_group_and_can_refuse_forever() {
    // max_num_batched_tokens 32: the cap is ⌈min(31 + 32, 4096) / 16⌉ + 1 = 5 blocks; a
    // 200-token prompt needs 13 full-attention blocks + 5 = 18 free.
    let a = [range(1000, 1200), range(5000, 5001)].concat();
    let mut fits = cache(std::slice::from_ref(&a), 19, 5);
    assert!(fits.admit_reserving(0, 0, 200, 32, 200).is_some());
    let mut short = cache(&[a], 18, 5);
    assert!(short.admit_reserving(0, 0, 200, 32, 200).is_none());
    short.check_invariants();
    assert_eq!(short.free_queue(), range(1, 18));
}

use proptest::prelude::*;

/// Sequences of `(prefix family, own tokens, outputs)`: families share their first 40 tokens.
fn seqs(shapes: &[(u32, u32, u32)]) -> (Vec<Vec<u32>>, Vec<usize>) {
    let mut out = Vec::new();
    let mut prompts = Vec::new();
    for (i, &(family, own, outputs)) in shapes.iter().enumerate() {
        let base = 10_000 * (family + 1);
        let mut s: Vec<u32> = (base..base + 40).collect();
        s.extend((0..own).map(|k| 1_000_000 + 1_000 * i as u32 + k));
        prompts.push(s.len());
        s.extend((0..outputs).map(|k| 5_000_000 + 1_000 * i as u32 + k));
        out.push(s);
    }
    (out, prompts)
}

/// Drives `c` as vLLM's scheduler would, one request at a time in `order` (admitted whole,
/// decoded to its end, finished or, when `preempt` says so, preempted after its prompt and
/// admitted again); returns each admission's hit. Refused admissions are skipped.
fn drive(c: &mut HybridCache, seqs: &[Vec<u32>], prompts: &[usize], order: &[usize], preempt: &[bool]) -> Vec<usize> {
    let mut hits = Vec::new();
    for (&r, &again) in order.iter().zip(preempt) {
        let (req, len, prompt) = (r as u32, seqs[r].len(), prompts[r]);
        let Some(a) = c.admit_reserving(req, req, prompt, usize::MAX, prompt) else { continue };
        hits.push(a.hit_tokens);
        c.computed(req, prompt);
        c.check_invariants();
        if again {
            c.preempt(req);
            c.check_invariants();
            match c.admit_reserving(req, req, prompt + 1, usize::MAX, prompt + 1) {
                Some(a) => {
                    hits.push(a.hit_tokens);
                    c.computed(req, prompt + 1);
                }
                None => {
                    c.finish(req);
                    continue;
                }
            }
        }
        let mut t = c.reqs.get(req).map_or(len, |s| s.computed);
        while t < len {
            if !c.grow(req, t + 1) {
                break;
            }
            t += 1;
            c.computed(req, t);
        }
        c.finish(req);
        c.check_invariants();
    }
    hits
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any mix of admissions, decodes, preemptions and finishes in a small pool keeps the pool
    /// whole: references match the tables, the free queue holds exactly the unreferenced
    /// blocks, every cached block is indexed under its group and key.
    #[test]
    fn the_pool_stays_consistent(
        shapes in prop::collection::vec((0u32..3, 0u32..90, 1u32..40), 1..12),
        order in prop::collection::vec(0usize..12, 1..24),
        preempt in prop::collection::vec(any::<bool>(), 24),
        blocks in 12u32..60,
        retention in prop_oneof![Just(Some(0)), Just(Some(32)), Just(None)],
        sliding_first in any::<bool>(),
    ) {
        let (s, p) = seqs(&shapes);
        let order: Vec<usize> = order.into_iter().map(|i| i % s.len()).collect();
        let layout = HybridLayout { retention, sliding_first, ..layout(CAP) };
        let mut c = HybridCache::new(Arc::new(TokenStore::from_seqs(&s)), 16, Some(blocks), layout);
        drive(&mut c, &s, &p, &order, &preempt);
        prop_assert_eq!(c.free_queue().len() as u32, blocks - 1, "every block back in the queue");
    }

    /// With a window longer than any sequence, every sliding block kept and room for all, the
    /// hybrid manager hits exactly what the one-group paged cache hits: the window never passes
    /// a block, so both groups cache the same blocks as the paged cache does.
    #[test]
    fn a_window_longer_than_everything_hits_as_the_paged_cache(
        shapes in prop::collection::vec((0u32..3, 0u32..90, 1u32..40), 1..12),
        order in prop::collection::vec(0usize..12, 1..24),
        preempt in prop::collection::vec(any::<bool>(), 24),
    ) {
        let (s, p) = seqs(&shapes);
        let order: Vec<usize> = order.into_iter().map(|i| i % s.len()).collect();
        let store = Arc::new(TokenStore::from_seqs(&s));
        let layout = HybridLayout { window: 1 << 20, retention: None, ..layout(CAP) };
        let mut hybrid = HybridCache::new(store.clone(), 16, None, layout);
        let got = drive(&mut hybrid, &s, &p, &order, &preempt);
        let mut paged = crate::cache::paged::PagedCache::new(store, 16, None);
        let mut want = Vec::new();
        for (&r, &again) in order.iter().zip(&preempt) {
            let (req, prompt) = (r as u32, p[r]);
            want.push(paged.admit_reserving(req, req, prompt, usize::MAX, prompt).unwrap().hit_tokens);
            if again {
                paged.preempt(req);
                want.push(paged.admit_reserving(req, req, prompt + 1, usize::MAX, prompt + 1).unwrap().hit_tokens);
            }
            for t in prompt + usize::from(again)..s[r].len() {
                prop_assert!(paged.grow(req, t + 1));
            }
            paged.finish(req);
        }
        prop_assert_eq!(got, want);
    }
}

/// One Mamba group (first) and one full-attention group at block 16, retention 0, prefills split
/// at the last cacheable boundary (Triton's GDN kernel): vLLM 0.33.0's `MambaManager` in align
/// mode, as the golden schedules of `tests/golden/vllm_mamba` show it.
fn mamba_layout(checkpoint_alignment: Option<u32>) -> HybridLayout {
    HybridLayout {
        full_groups: 1,
        sliding_groups: 0,
        sliding_first: false,
        window: 0,
        retention: Some(0),
        admission_cap_blocks: 0,
        mamba_groups: 1,
        mamba: Some(MambaRules { first: true, checkpoint_alignment, max_prefill_tokens: 8192, prefix_caching: true }),
    }
}

const M: usize = 0;

/// Runs request `req` (prompt `prompt`, `len` tokens in all) to its end through the cache as
/// vLLM's scheduler does with an unlimited budget: admitted with its chunk split, then a chunk
/// or a decode a step, each step settled; returns the hit and the chunks.
fn run_mamba(c: &mut HybridCache, req: u32, prompt: usize, len: usize) -> Option<(usize, Vec<usize>)> {
    let a = c.admit_reserving(req, req, prompt, usize::MAX, prompt)?;
    let mut chunks = vec![a.allocated_tokens - a.hit_tokens];
    let mut t = a.allocated_tokens;
    c.computed(req, t);
    c.check_invariants();
    while t < len {
        c.settle();
        let known = prompt.max(t + 1);
        let n = c.align_chunk(req, known, known - t);
        assert!(n > 0, "an unlimited budget always runs a chunk");
        assert!(c.grow(req, t + n));
        if t < prompt {
            chunks.push(n);
        }
        t += n;
        c.computed(req, t);
        c.check_invariants();
    }
    c.finish(req);
    c.settle();
    c.check_invariants();
    Some((a.hit_tokens, chunks))
}

#[test]
fn the_second_sibling_marks_the_junction_and_the_third_hits_it() {
    // P = 64 tokens; r0 = P + 20, r1 = P + 30, r2 = P + 10 (the golden `shared_prefix`).
    let p = range(100, 164);
    let s: Vec<Vec<u32>> = [(20, 0), (30, 1), (10, 2)]
        .iter()
        .map(|&(n, i)| [p.clone(), range(1000 * (i + 1), 1000 * (i + 1) + n)].concat())
        .collect();
    let mut c = HybridCache::new(Arc::new(TokenStore::from_seqs(&s)), 16, Some(2000), mamba_layout(None));
    // r0: split at ⌊83 / 16⌋ · 16 = 80, where its state is cached (the replay boundary).
    assert_eq!(run_mamba(&mut c, 0, 84, 84).unwrap(), (0, vec![80, 4]));
    // r1: the full-attention hit is P, no state within it: no hit, the junction at 64 stops its
    // first chunk and caches the state there; the next stops at the replay boundary 80.
    assert_eq!(run_mamba(&mut c, 1, 94, 94).unwrap(), (0, vec![64, 16, 14]));
    // r2 starts from r1's state at the junction.
    assert_eq!(run_mamba(&mut c, 2, 74, 74).unwrap(), (64, vec![10]));
}

#[test]
fn a_state_cached_in_this_step_serves_no_other_request_before_the_next() {
    // Two 64-token prompts sharing 48 tokens: the first caches its state at 48 (its replay
    // boundary ⌊63 / 16⌋ · 16) in the step that admits it.
    let p = range(100, 148);
    let s = vec![[p.clone(), range(1000, 1016)].concat(), [p, range(2000, 2016)].concat()];
    let mut c = HybridCache::new(Arc::new(TokenStore::from_seqs(&s)), 16, Some(40), mamba_layout(None));
    let a = c.admit_reserving(0, 0, 64, usize::MAX, 64).unwrap();
    assert_eq!((a.hit_tokens, a.allocated_tokens), (0, 48));
    assert_eq!(c.block_table(0, M).unwrap(), &[0, 0, 1]);
    assert_eq!(c.peek(1, 64), 48);
    assert!(c.admit_reserving(1, 1, 64, usize::MAX, 64).is_none(), "admitted in the step that cached its state");
    c.computed(0, 48);
    c.settle();
    let b = c.admit_reserving(1, 1, 64, usize::MAX, 64).unwrap();
    assert_eq!((b.hit_tokens, b.allocated_tokens), (48, 64));
    // The hit state and the new state, the hit padded with nulls.
    assert_eq!(c.block_table(1, M).unwrap()[..2], [0, 0]);
    c.check_invariants();
}

#[test]
fn a_chunk_exports_its_checkpoint_from_inside_with_flashinfer() {
    // With checkpoints every block the 84-token prompt runs whole; the state at 80 is written
    // from inside the chunk into its own slot and cached, beside the running state at 84.
    let s = vec![range(100, 184), [range(100, 180), range(900, 910)].concat()];
    let mut c = HybridCache::new(Arc::new(TokenStore::from_seqs(&s)), 16, Some(2000), mamba_layout(Some(16)));
    let a = c.admit_reserving(0, 0, 84, usize::MAX, 84).unwrap();
    assert_eq!(a.allocated_tokens, 84);
    let t = c.block_table(0, M).unwrap();
    assert_eq!((t.len(), t[..4].iter().all(|&b| b == 0), t[4] != 0 && t[5] != 0), (6, true, true));
    assert!(c.is_cached(t[4]) && !c.is_cached(t[5]));
    c.computed(0, 84);
    c.finish(0);
    c.settle();
    assert_eq!(run_mamba(&mut c, 1, 90, 90).unwrap(), (80, vec![10]));
}

#[test]
fn without_prefix_caching_a_request_holds_one_state_block_and_nothing_is_cached() {
    // `mamba_cache_mode` none (the golden `no_prefix_caching`): the 84-token prompt runs whole,
    // 6 full-attention blocks and 1 state block; a resend hits nothing.
    let s = vec![range(100, 184), range(100, 184)];
    let layout = HybridLayout {
        mamba: Some(MambaRules { prefix_caching: false, ..mamba_layout(None).mamba.unwrap() }),
        ..mamba_layout(None)
    };
    let mut c = HybridCache::new(Arc::new(TokenStore::from_seqs(&s)), 16, Some(2000), layout);
    assert_eq!(c.spec().policy, Policy::None);
    assert_eq!(run_mamba(&mut c, 0, 84, 84).unwrap(), (0, vec![84]));
    let a = c.admit_reserving(1, 1, 84, usize::MAX, 84).unwrap();
    assert_eq!((a.hit_tokens, a.allocated_tokens), (0, 84));
    assert_eq!((c.block_table(1, M).unwrap().len(), c.block_table(1, 1).unwrap().len()), (1, 6));
    assert!(c.grow(1, 200));
    assert_eq!(c.block_table(1, M).unwrap().len(), 1);
    assert!((1..2000).all(|b| !c.is_cached(b)));
    c.check_invariants();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Mamba groups under any mix of sequences, pool sizes, retentions, checkpoint alignments and
    /// group orders keep the pool whole, hold at most three states a request, and give every
    /// block back.
    #[test]
    fn mamba_groups_keep_the_pool_consistent(
        shapes in prop::collection::vec((0u32..3, 0u32..90, 1u32..40), 1..12),
        order in prop::collection::vec(0usize..12, 1..24),
        blocks in 24u32..80,
        retention in prop_oneof![Just(Some(0)), Just(Some(32)), Just(None)],
        checkpoint in prop_oneof![Just(None), Just(Some(16)), Just(Some(1))],
        groups in 1u8..4,
        first in any::<bool>(),
        prefix_caching in any::<bool>(),
    ) {
        let (s, p) = seqs(&shapes);
        let order: Vec<usize> = order.into_iter().map(|i| i % s.len()).collect();
        let mut layout = HybridLayout { retention, mamba_groups: groups, ..mamba_layout(checkpoint) };
        let rules = layout.mamba.as_mut().unwrap();
        (rules.first, rules.prefix_caching) = (first, prefix_caching);
        let mut c = HybridCache::new(Arc::new(TokenStore::from_seqs(&s)), 16, Some(blocks), layout);
        for &r in &order {
            let _ = run_mamba(&mut c, r as u32, p[r], s[r].len());
        }
        prop_assert_eq!(c.free_queue().len() as u32, blocks - 1, "every block back in the queue");
    }
}
