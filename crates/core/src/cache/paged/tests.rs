//! Hand-worked vLLM v1 scenarios, starting with ENGINE_SPEC §1.11 step by step.

use super::*;

fn store(seqs: &[Vec<u32>]) -> Arc<TokenStore> {
    Arc::new(TokenStore::from_seqs(seqs))
}

fn range(a: u32, b: u32) -> Vec<u32> {
    (a..b).collect()
}

/// ENGINE_SPEC §1.11: block_size 4, num_gpu_blocks 11; every freed block to the queue's tail
/// (vLLM before PR #42656).
#[test]
fn engine_spec_worked_vector() {
    let r0 = range(100, 117); // prompt 100..114, outputs 115, 116
    let r1 = [range(100, 110), range(900, 904)].concat();
    let r2 = [range(100, 112), range(500, 517)].concat();
    let st = store(&[r0, r1, r2]);
    let mut c = PagedCache::with_blocks(st, 4, Some(11));
    c.set_unhashed_first(false);
    assert_eq!(c.free_queue(), range(1, 11));

    // 1. R0: 15-token prompt, no hit, 4 blocks; blocks 1..3 full and hashed.
    let a = c.admit(0, 0, 15, usize::MAX).unwrap();
    assert_eq!((a.hit_tokens, a.allocated_tokens), (0, 15));
    assert_eq!(c.block_table(0).unwrap(), &[1, 2, 3, 4]);
    assert!(c.is_cached(1) && c.is_cached(2) && c.is_cached(3) && !c.is_cached(4));
    assert_eq!(c.free_queue(), range(5, 11));
    c.check_invariants();

    // 2. Decode 115: block 4 fills and is hashed; decode 116 needs a fifth block.
    assert!(c.grow(0, 16));
    assert!(c.is_cached(4));
    assert!(c.grow(0, 17));
    assert_eq!(c.block_table(0).unwrap(), &[1, 2, 3, 4, 5]);
    assert_eq!(c.free_queue(), range(6, 11));

    // 3. R1 hits blocks 1, 2; its third block misses; two new blocks, the third hashed.
    assert_eq!(c.peek(1, 14), 8);
    let a = c.admit(1, 1, 14, usize::MAX).unwrap();
    assert_eq!(a.hit_tokens, 8);
    assert_eq!(c.block_table(1).unwrap(), &[1, 2, 6, 7]);
    assert!(c.is_cached(6) && !c.is_cached(7));
    assert_eq!(c.free_queue(), vec![8, 9, 10]);
    c.check_invariants();

    // 4. R0 finishes: reverse order; shared blocks 2, 1 stay in use.
    c.finish(0);
    assert_eq!(c.free_queue(), vec![8, 9, 10, 5, 4, 3]);
    // 5. R1 finishes.
    c.finish(1);
    assert_eq!(c.free_queue(), vec![8, 9, 10, 5, 4, 3, 7, 6, 2, 1]);
    c.check_invariants();

    // 6. R2 hits 1, 2, 3 (touched out of the queue), pops 8, 9, 10, 5, 4 — evicting cached 4.
    let a = c.admit(2, 2, 29, usize::MAX).unwrap();
    assert_eq!((a.hit_tokens, a.allocated_tokens), (12, 29));
    assert_eq!(c.block_table(2).unwrap(), &[1, 2, 3, 8, 9, 10, 5, 4]);
    assert_eq!(c.free_queue(), vec![7, 6]);
    assert_eq!(c.stats().evicted_tokens, 4);
    c.check_invariants();
}

/// The same requests under vLLM 0.33's `BlockPool.free_blocks`: a freed block without a hash
/// (a partial last block) goes to the queue's front — before the never-used blocks — the
/// hashed ones to its tail, each group in the order freed (the block table reversed).
#[test]
fn unhashed_blocks_are_freed_to_the_front() {
    let r0 = range(100, 117);
    let r1 = [range(100, 110), range(900, 904)].concat();
    let r2 = [range(100, 112), range(500, 517)].concat();
    let st = store(&[r0, r1, r2]);
    let mut c = PagedCache::with_blocks(st, 4, Some(11));
    assert!(c.unhashed_first, "vLLM 0.33's order is the default");
    c.admit(0, 0, 15, usize::MAX).unwrap();
    assert!(c.grow(0, 16) && c.grow(0, 17));
    c.admit(1, 1, 14, usize::MAX).unwrap();
    assert_eq!(c.block_table(1).unwrap(), &[1, 2, 6, 7]);
    // R0 frees 5 (one token, no hash), 4, 3 (hashed); 2 and 1 stay with R1.
    c.finish(0);
    assert_eq!(c.free_queue(), vec![5, 8, 9, 10, 4, 3]);
    // R1 frees 7 (no hash) to the front, 6, 2, 1 to the tail.
    c.finish(1);
    assert_eq!(c.free_queue(), vec![7, 5, 8, 9, 10, 4, 3, 6, 2, 1]);
    c.check_invariants();
    // R2 hits 1, 2, 3 and pops 7, 5, 8, 9, 10: nothing cached is evicted.
    let a = c.admit(2, 2, 29, usize::MAX).unwrap();
    assert_eq!((a.hit_tokens, a.allocated_tokens), (12, 29));
    assert_eq!(c.block_table(2).unwrap(), &[1, 2, 3, 7, 5, 8, 9, 10]);
    assert_eq!(c.free_queue(), vec![4, 6]);
    assert_eq!(c.stats().evicted_tokens, 0);
    c.check_invariants();
}

/// Whole-sequence admission (vLLM 0.33 `allocate_slots(..., full_sequence_must_fit=True)`):
/// blocks for every known token, less the hits, must be free, a hit waiting in the free queue
/// counting as taken; the first chunk alone fitting is not enough.
#[test]
fn whole_sequence_admission_counts_evictable_hits() {
    let st = store(&[range(0, 9), range(0, 21)]);
    let mut c = PagedCache::with_blocks(st, 4, Some(7)); // 6 usable blocks
    c.admit(0, 0, 9, usize::MAX).unwrap(); // blocks 1, 2 (hashed), 3
    c.finish(0);
    assert_eq!(c.free_queue(), vec![3, 4, 5, 6, 2, 1]);
    // 21 tokens: 6 blocks; 2 hit (both free), so 4 more + 2 evictable = 6 ≤ 6 free.
    assert!(c.admit_reserving(1, 1, 21, 4, 21).is_some());
    c.finish(1);
    // That chunk registered a third block. Hold one block: 5 free; 3 hits (free) + 3 more = 6
    // blocks needed: refused, though a 4-token chunk (one block) fits.
    c.admit(2, 0, 1, usize::MAX).unwrap();
    assert_eq!(c.free_len(), 5);
    assert!(c.admit_reserving(1, 1, 21, 4, 21).is_none());
    assert!(c.block_table(1).is_none());
    assert_eq!(c.admit_reserving(1, 1, 21, 4, 0).map(|a| (a.hit_tokens, a.allocated_tokens)), Some((12, 16)));
    c.check_invariants();
}

#[test]
fn fully_cached_aligned_prompt_recomputes_one_block() {
    let st = store(&[range(0, 8)]);
    let mut c = PagedCache::with_blocks(st, 4, None);
    c.admit(0, 0, 8, usize::MAX).unwrap();
    c.finish(0);
    // 8 tokens = 2 full blocks, both cached; only (8 − 1) / 4 = 1 block may hit.
    assert_eq!(c.admit(1, 0, 8, usize::MAX).unwrap().hit_tokens, 4);
}

#[test]
fn a_huge_pool_costs_only_what_it_uses() {
    // About 4 G blocks: nothing per block may be allocated before the blocks are used.
    let st = store(&[range(0, 12)]);
    let mut c = PagedCache::with_blocks(st, 4, Some(u32::MAX - 1));
    c.admit(0, 0, 12, usize::MAX).unwrap();
    c.finish(0);
    assert_eq!(c.admit(1, 0, 12, usize::MAX).unwrap().hit_tokens, 8);
    assert!(c.ring.len() <= 1 << 12 && c.blk.len() <= 8);
    assert_eq!(c.free_len(), (u32::MAX - 2) as u64 - 3);
}

#[test]
fn the_highest_block_of_a_pool_is_indexed_at_either_width() {
    // 2^16 blocks (block 0 included) fit a 16-bit index; one more does not. Either way the
    // pool's highest block, cached, must be found.
    for n in [1u32 << 16, (1 << 16) + 1] {
        let junk = range(1_000_000, 1_000_000 + n - 3);
        let st = store(&[junk, vec![1, 2], vec![1, 2, 3]]);
        let mut c = boxed(st, 1, Some(n as u64 - 1), None, true);
        c.admit(0, 0, n as usize - 3, usize::MAX).unwrap(); // blocks 1..n-3
        c.admit(1, 1, 2, usize::MAX).unwrap(); // blocks n-2 and n-1, both cached
        c.finish(1);
        c.finish(0);
        assert_eq!(c.admit(2, 2, 3, usize::MAX).unwrap().hit_tokens, 2, "pool of {n} blocks");
        c.check_invariants();
    }
}

#[test]
fn admission_fails_without_side_effects() {
    let st = store(&[range(0, 12), range(50, 70)]);
    let mut c = PagedCache::with_blocks(st, 4, Some(5)); // 4 usable blocks
    c.admit(0, 0, 12, usize::MAX).unwrap();
    let before = c.free_queue();
    assert!(c.admit(1, 1, 20, usize::MAX).is_none());
    assert_eq!(c.free_queue(), before);
    assert!(c.block_table(1).is_none());
    // A chunk that fits is admitted (vLLM schedules a partial prefill under a token budget).
    let a = c.admit(1, 1, 20, 4).unwrap();
    assert_eq!(a.allocated_tokens, 4);
    c.check_invariants();
}

#[test]
fn duplicates_are_not_merged_and_the_oldest_is_returned() {
    let st = store(&[range(0, 9)]);
    let mut c = PagedCache::with_blocks(st, 4, None);
    // R0 schedules only its first block; R1 hits it and computes block [4, 8) itself.
    assert_eq!(c.admit(0, 0, 9, 4).unwrap().allocated_tokens, 4);
    assert_eq!(c.admit(1, 0, 9, usize::MAX).unwrap().hit_tokens, 4);
    assert_eq!(c.block_table(1).unwrap(), &[1, 2, 3]);
    // R0 then computes the same block into its own block 4: both stay cached.
    assert!(c.grow(0, 8));
    assert_eq!(c.block_table(0).unwrap(), &[1, 4]);
    assert!(c.is_cached(2) && c.is_cached(4));
    assert!(c.blk[2].first && !c.blk[4].first, "block 2 answers, block 4 queues behind it");
    c.finish(1);
    c.finish(0);
    c.check_invariants();
    // A later lookup gets the older duplicate.
    c.admit(2, 0, 9, usize::MAX).unwrap();
    assert_eq!(&c.block_table(2).unwrap()[..2], &[1, 2]);
}

/// A preempted request remembers its block table as its next lookup's answer. One of those
/// blocks is evicted, its hash is computed again into another block (now the oldest carrier),
/// and then recomputed into the remembered block once more, as a duplicate: the resumed
/// request must get the oldest carrier, as vLLM's map would answer, not the remembered block.
#[test]
fn a_remembered_block_that_became_a_duplicate_is_not_the_answer() {
    let st = store(&[range(0, 9), range(100, 112), range(300, 303)]);
    let mut c = PagedCache::with_blocks(st, 4, Some(6));
    c.set_unhashed_first(false);
    c.admit(9, 2, 3, usize::MAX).unwrap();
    c.admit(0, 0, 9, usize::MAX).unwrap();
    assert_eq!(c.block_table(0).unwrap(), &[2, 3, 4]);
    c.preempt(0);
    c.finish(9);
    assert_eq!(c.free_queue(), vec![5, 4, 3, 2, 1]);
    // R1 pops 5, 4, 3: block 3 loses the second block's hash.
    c.admit(1, 1, 12, usize::MAX).unwrap();
    assert_eq!(c.block_table(1).unwrap(), &[5, 4, 3]);
    // R2 (8 tokens: only the first block can hit) computes the second block into block 1.
    assert_eq!(c.admit(2, 0, 8, usize::MAX).unwrap().hit_tokens, 4);
    assert_eq!(c.block_table(2).unwrap(), &[2, 1]);
    c.finish(1);
    // R3 does the same into block 3 again: a duplicate behind block 1.
    c.admit(3, 0, 8, usize::MAX).unwrap();
    assert_eq!(c.block_table(3).unwrap(), &[2, 3]);
    c.check_invariants();
    let a = c.admit(0, 0, 9, usize::MAX).unwrap();
    assert_eq!(a.hit_tokens, 8);
    assert_eq!(c.block_table(0).unwrap(), &[2, 1, 4], "the oldest carrier of the second hash is block 1");
    c.check_invariants();
}

#[test]
fn preempted_blocks_stay_hashed_and_are_re_hit() {
    let st = store(&[range(0, 20)]);
    let mut c = PagedCache::with_blocks(st, 4, Some(11));
    c.admit(0, 0, 17, usize::MAX).unwrap();
    c.preempt(0);
    assert_eq!(c.stats().partial_block_waste_tokens, 3);
    let a = c.admit(0, 0, 17, usize::MAX).unwrap();
    assert_eq!(a.hit_tokens, 16);
    c.check_invariants();
}

use crate::cache::conformance::{op_strategy, seqs_strategy, Op};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    /// The optimised pool (remembered lookups, the watched queue head, the duplicate chains)
    /// behaves exactly as the literal model of vLLM's: same answers, same block ids, same free
    /// queue and counters after every operation, with either index word and either key map.
    #[test]
    fn matches_the_literal_model(
        seqs in seqs_strategy(),
        ops in prop::collection::vec(op_strategy(), 1..80),
        block in prop::sample::select(vec![1usize, 2, 4]),
        num_blocks in prop::option::weighted(0.9, 2u32..16),
        first_gen in prop::sample::select(vec![1u16, NO_GEN - 3]),
        one_slot_ring in any::<bool>(),
        narrow_index in any::<bool>(),
        unhashed_first in any::<bool>(),
        full_reserve in any::<bool>(),
        sparse in any::<bool>(),
    ) {
        let case = Case { seqs, ops, block, num_blocks, first_gen, one_slot_ring, unhashed_first, full_reserve, sparse };
        if narrow_index && num_blocks.is_some() && sparse {
            matches_literal::<Sparse16>(&case)?;
        } else if narrow_index && num_blocks.is_some() {
            matches_literal::<u16>(&case)?;
        } else {
            matches_literal::<u32>(&case)?;
        }
    }
}

/// One differential case.
struct Case {
    seqs: Vec<Vec<u32>>,
    ops: Vec<Op>,
    block: usize,
    num_blocks: Option<u32>,
    first_gen: u16,
    one_slot_ring: bool,
    /// vLLM 0.33's free order (unhashed blocks to the front).
    unhashed_first: bool,
    /// Admissions reserve the whole known sequence (vLLM 0.33's `full_sequence_must_fit`).
    full_reserve: bool,
    /// The key map made in chunks as it is written (one instance of many).
    sparse: bool,
}

fn matches_literal<W: IndexWord>(case: &Case) -> Result<(), TestCaseError> {
    let Case { ref seqs, ref ops, block, num_blocks, first_gen, one_slot_ring, unhashed_first, full_reserve, sparse } =
        *case;
    let st = store(seqs);
    let mut fast = PagedCache::<W>::build(st.clone(), block as u32, num_blocks, None, !sparse);
    fast.set_unhashed_first(unhashed_first);
    fast.next_gen = first_gen; // the second start wraps the watch generations
    if one_slot_ring {
        fast.ring = vec![GONE; 1]; // the free-queue ring compacts and grows as it goes
    }
    let mut lit = reference::RefPool::new(st.clone(), block, num_blocks, unhashed_first);
    let mut live: Vec<Option<(SeqId, usize)>> = vec![None; 6];
    let mut refused: Option<(usize, SeqId, usize, usize)> = None;
    for op in ops {
        match *op {
            Op::Admit { .. } | Op::Retry => {
                let attempt = match *op {
                    Op::Admit { seq, known_frac, chunk } => live.iter().position(Option::is_none).map(|slot| {
                        let seq = (seq % seqs.len()) as SeqId;
                        let len = st.seq_len(seq);
                        (slot, seq, 1 + ((len - 1) as f64 * known_frac) as usize, chunk)
                    }),
                    _ => refused.filter(|r| live[r.0].is_none()),
                };
                let Some((slot, seq, known, chunk)) = attempt else { continue };
                let reserve = if full_reserve { known } else { 0 };
                let a = fast.admit_reserving(slot as ReqId, seq, known, chunk, reserve);
                let b = lit.admit(slot as u32, seq, known, chunk, reserve);
                prop_assert_eq!(a, b, "admit {:?}", (slot, seq, known, chunk));
                refused = None;
                match a {
                    Some(a) => live[slot] = Some((seq, a.allocated_tokens)),
                    None => refused = Some((slot, seq, known, chunk)),
                }
            }
            Op::Grow { req, by } => {
                if let Some((seq, allocated)) = live[req] {
                    let total = (allocated + by).min(st.seq_len(seq));
                    let ok = fast.grow(req as ReqId, total);
                    prop_assert_eq!(ok, lit.grow(req as u32, total), "grow");
                    if ok {
                        live[req] = Some((seq, total));
                    }
                }
            }
            Op::Computed { .. } => {} // vLLM registers blocks at allocation
            Op::Finish { req } | Op::Preempt { req } => {
                if live[req].take().is_some() {
                    if matches!(op, Op::Finish { .. }) {
                        fast.finish(req as ReqId);
                    } else {
                        fast.preempt(req as ReqId);
                    }
                    lit.free(req as u32);
                }
            }
        }
        fast.check_invariants();
        let mut want = lit.free_queue();
        if num_blocks.is_none() {
            want.sort_unstable(); // an unlimited pool never evicts, so keeps no order
        }
        prop_assert_eq!(fast.free_queue(), want, "free queue after {:?}", op);
        prop_assert_eq!(fast.stats(), lit.stats, "counters after {:?}", op);
        for req in 0..live.len() as u32 {
            prop_assert_eq!(fast.block_table(req), lit.block_table(req), "block table of {}", req);
        }
        for seq in 0..seqs.len() as SeqId {
            let len = st.seq_len(seq);
            prop_assert_eq!(fast.peek(seq, len), lit.peek(seq, len), "peek");
        }
    }
    Ok(())
}

/// vLLM V0 multi-step's lookahead slots are allocated, not cached: a 6-token sequence decoding
/// with 7 slots ahead holds ⌈13 / 4⌉ = 4 blocks, and only its one block of known tokens is hit
/// by a later request of the same 16 tokens; past the sequence's end no block is cached at all.
#[test]
fn lookahead_slots_are_allocated_not_cached() {
    let st = store(&[range(0, 6), range(0, 16)]);
    let mut c = PagedCache::with_blocks(st, 4, Some(9)); // 8 usable blocks
    c.admit(0, 0, 5, usize::MAX).unwrap();
    assert!(c.grow_ahead(0, 6, 7));
    assert_eq!(c.block_table(0).map(<[u32]>::len), Some(4));
    assert_eq!(c.free_len(), 4);
    assert_eq!(c.peek(1, 16), 4);
    // More than the free blocks ahead: refused, nothing changed.
    assert!(!c.grow_ahead(0, 6, 30));
    assert_eq!((c.block_table(0).map(<[u32]>::len), c.free_len()), (Some(4), 4));
    c.check_invariants();
}
