//! A literal model of vLLM v1's block pool (ENGINE_SPEC §1), written for clarity rather than
//! speed, that the optimised [`PagedCache`](super::PagedCache) is checked against operation by
//! operation: a plain free queue (hits are searched for and removed from it), a map from hash to
//! its carriers in registration order, every lookup hashed and walked from the first block, and
//! no memory of earlier lookups. Freeing follows vLLM's `BlockPool.free_blocks` over the block
//! table reversed: either every block to the tail (before vLLM PR #42656) or the blocks without
//! a hash prepended to the front as one group, in that order, and the others to the tail (0.33).

use crate::cache::{Admitted, CacheStats};
use crate::workload::{SeqId, TokenStore};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

struct Req {
    seq: SeqId,
    blocks: Vec<u32>,
    registered: usize,
    tokens: usize,
}

pub struct RefPool {
    store: Arc<TokenStore>,
    block: usize,
    /// `None` = unlimited: every allocation takes a never-used block.
    num_blocks: Option<u32>,
    ref_cnt: Vec<u32>,
    hash: Vec<Option<u64>>,
    free: VecDeque<u32>,
    carriers: HashMap<u64, Vec<u32>>,
    reqs: HashMap<u32, Req>,
    /// Freed blocks without a hash go to the front of the queue.
    unhashed_first: bool,
    pub stats: CacheStats,
}

impl RefPool {
    pub fn new(store: Arc<TokenStore>, block: usize, num_blocks: Option<u32>, unhashed_first: bool) -> Self {
        let n = num_blocks.unwrap_or(1) as usize;
        Self {
            store,
            block,
            num_blocks,
            ref_cnt: vec![0; n],
            hash: vec![None; n],
            free: (1..n as u32).collect(),
            carriers: HashMap::new(),
            reqs: HashMap::new(),
            unhashed_first,
            stats: CacheStats::default(),
        }
    }

    pub fn free_queue(&self) -> Vec<u32> {
        self.free.iter().copied().collect()
    }

    pub fn block_table(&self, req: u32) -> Option<&[u32]> {
        self.reqs.get(&req).map(|r| &r.blocks[..])
    }

    fn free_len(&self) -> usize {
        if self.num_blocks.is_some() {
            self.free.len()
        } else {
            usize::MAX
        }
    }

    /// Hash of the `i`-th full block of `seq`, chained from the first.
    fn block_hash(&self, seq: SeqId, i: usize) -> u64 {
        (0..=i).fold(ROOT_HASH, |parent, k| {
            chain_hash(parent, self.store.fingerprint(seq, k * self.block, self.block), self.block)
        })
    }

    fn hits(&self, seq: SeqId, known: usize) -> Vec<u32> {
        let mut hits = Vec::new();
        for i in 0..known.saturating_sub(1) / self.block {
            match self.carriers.get(&self.block_hash(seq, i)) {
                Some(v) => hits.push(v[0]),
                None => break,
            }
        }
        hits
    }

    pub fn peek(&self, seq: SeqId, known: usize) -> usize {
        self.hits(seq, known).len() * self.block
    }

    fn pop(&mut self) -> u32 {
        let b = if self.num_blocks.is_some() {
            let b = self.free.pop_front().expect("caller checked");
            if let Some(h) = self.hash[b as usize].take() {
                let v = self.carriers.get_mut(&h).expect("cached block in the map");
                v.retain(|&x| x != b);
                if v.is_empty() {
                    self.carriers.remove(&h);
                }
                self.stats.evicted_tokens += self.block as u64;
            }
            b
        } else {
            self.ref_cnt.push(0);
            self.hash.push(None);
            self.ref_cnt.len() as u32 - 1
        };
        self.ref_cnt[b as usize] = 1;
        b
    }

    fn register(&mut self, req: u32, upto_tokens: usize) {
        let r = self.reqs.get(&req).expect("live");
        let (seq, from, to) = (r.seq, r.registered, upto_tokens / self.block);
        for i in from..to {
            let b = self.reqs[&req].blocks[i];
            let h = self.block_hash(seq, i);
            self.hash[b as usize] = Some(h);
            self.carriers.entry(h).or_default().push(b);
        }
        let r = self.reqs.get_mut(&req).expect("live");
        r.registered = r.registered.max(to);
    }

    fn note_peak(&mut self) {
        let used = self.ref_cnt.iter().enumerate().skip(1).filter(|&(b, &r)| r > 0 || self.hash[b].is_some()).count();
        self.stats.peak_used_tokens = self.stats.peak_used_tokens.max((used * self.block) as u64);
    }

    /// Admission; `reserve` tokens (at least those allocated) must find blocks, less the hits,
    /// evictable hits counted as taken (vLLM's `full_sequence_must_fit`).
    pub fn admit(&mut self, req: u32, seq: SeqId, known: usize, max_new: usize, reserve: usize) -> Option<Admitted> {
        if self.free_len() == 0 && max_new > 0 {
            return None;
        }
        let hits = self.hits(seq, known);
        let hit = hits.len() * self.block;
        let total = hit + (known - hit).min(max_new);
        let need = total.div_ceil(self.block) - hits.len();
        let evictable = hits.iter().filter(|&&b| self.ref_cnt[b as usize] == 0).count();
        let reserved = reserve.max(total).div_ceil(self.block) - hits.len();
        if reserved.saturating_add(evictable) > self.free_len() {
            return None;
        }
        for &b in &hits {
            if self.ref_cnt[b as usize] == 0 {
                let at = self.free.iter().position(|&x| x == b).expect("free block in the queue");
                self.free.remove(at);
            }
            self.ref_cnt[b as usize] += 1;
        }
        let mut blocks = hits;
        let registered = blocks.len();
        for _ in 0..need {
            blocks.push(self.pop());
        }
        self.reqs.insert(req, Req { seq, blocks, registered, tokens: total });
        self.register(req, total);
        self.note_peak();
        Some(Admitted { hit_tokens: hit, allocated_tokens: total })
    }

    pub fn grow(&mut self, req: u32, total: usize) -> bool {
        let have = self.reqs[&req].blocks.len();
        let need = total.div_ceil(self.block).saturating_sub(have);
        if need > self.free_len() {
            return false;
        }
        for _ in 0..need {
            let b = self.pop();
            self.reqs.get_mut(&req).expect("live").blocks.push(b);
        }
        let r = self.reqs.get_mut(&req).expect("live");
        r.tokens = r.tokens.max(total);
        self.register(req, total);
        self.note_peak();
        true
    }

    /// Finish and preempt free the same way: the block table, last block first.
    pub fn free(&mut self, req: u32) {
        let r = self.reqs.remove(&req).expect("live");
        self.stats.partial_block_waste_tokens += (r.blocks.len() * self.block - r.tokens) as u64;
        let mut front = Vec::new();
        for &b in r.blocks.iter().rev() {
            self.ref_cnt[b as usize] -= 1;
            if self.ref_cnt[b as usize] == 0 {
                if self.unhashed_first && self.hash[b as usize].is_none() {
                    front.push(b);
                } else {
                    self.free.push_back(b);
                }
            }
        }
        for &b in front.iter().rev() {
            self.free.push_front(b);
        }
    }
}

/// Chained block key: what vLLM's `hash_block_tokens(parent, block_tokens)` stands for
/// (64-bit: no collisions among the few blocks of a test).
fn chain_hash(parent: u64, fingerprint: u64, len: usize) -> u64 {
    splitmix(parent ^ splitmix(fingerprint ^ ((len as u64) << 56)))
}

/// Parent key of the first block of every sequence (vLLM's `NONE_HASH`).
const ROOT_HASH: u64 = 0x6a09_e667_f3bc_c908;

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
