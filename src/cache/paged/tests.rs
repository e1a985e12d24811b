//! Hand-worked vLLM v1 scenarios, starting with ENGINE_SPEC §1.11 step by step.

use super::*;

fn store(seqs: &[Vec<u32>]) -> Arc<TokenStore> {
    Arc::new(TokenStore::from_seqs(seqs))
}

fn range(a: u32, b: u32) -> Vec<u32> {
    (a..b).collect()
}

/// ENGINE_SPEC §1.11: block_size 4, num_gpu_blocks 11.
#[test]
fn engine_spec_worked_vector() {
    let r0 = range(100, 117); // prompt 100..114, outputs 115, 116
    let r1 = [range(100, 110), range(900, 904)].concat();
    let r2 = [range(100, 112), range(500, 517)].concat();
    let st = store(&[r0, r1, r2]);
    let mut c = PagedCache::with_blocks(st, 4, Some(11));
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
    assert_eq!(c.map.len(), 2);
    c.finish(1);
    c.finish(0);
    c.check_invariants();
    // A later lookup gets the older duplicate.
    c.admit(2, 0, 9, usize::MAX).unwrap();
    assert_eq!(&c.block_table(2).unwrap()[..2], &[1, 2]);
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
