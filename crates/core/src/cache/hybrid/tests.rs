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
