//! SGLang's scheduler (ENGINE_SPEC §3.4–3.8). Each step is a prefill ("extend") batch or a
//! decode batch, prefill first. A prefill batch takes the in-progress chunked request first,
//! then waiting requests in policy order while the budgets last: `max_prefill_tokens`,
//! `chunked_prefill_size` (at most one request is split), and the memory budget
//! `available + evictable − Σ_running min(max_new − out, 4096) × new_token_ratio`, which every
//! admitted request lowers by its extend length plus `min(max_new, 4096)`. A memory or
//! request-count refusal sets `batch_is_full`: no prefill is tried again until a request leaves.
//! Before a decode step, if the pool cannot hold one more token per request, requests are
//! retracted — fewest outputs first, longest prompt on ties — to the end of the waiting queue,
//! and new_token_ratio jumps; otherwise it decays towards its floor.

use super::{EngineConfig, ReqRt, SchedulePolicy, Scheduler, Step};
use crate::analyze::items::Tokens;
use crate::analyze::prefix_tree::build_trie;
use crate::cache::{PrefixCache, ReqId};
use crate::workload::TokenStore;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::sync::Arc;

/// `SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`.
const CLIP_MAX_NEW: u64 = 4096;
/// `SGLANG_INIT_NEW_TOKEN_RATIO`, `SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`,
/// `SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`, `SGLANG_RETRACT_DECODE_STEPS`.
const INIT_RATIO: f64 = 0.7;
const MIN_RATIO_FACTOR: f64 = 0.14;
const DECAY_STEPS: f64 = 600.0;
const RETRACT_DECODE_STEPS: f64 = 20.0;
/// Above this many waiting requests LPM keeps the current order.
const LPM_FALLBACK_WAITING: usize = 128;
/// `IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD` and `…_DEPRIORITIZE_THRESHOLD`.
const IN_BATCH_CHECK: usize = 32;
const IN_BATCH_DEPRIORITIZE: usize = 32;

/// SGLang's queues and budgets.
pub struct Sglang {
    cfg: EngineConfig,
    store: Arc<TokenStore>,
    waiting: Vec<ReqId>,
    running: Vec<ReqId>,
    /// Prefilled in the last step; they join `running` at the next one.
    prefilled: Vec<ReqId>,
    chunked: Option<ReqId>,
    batch_is_full: bool,
    ratio: f64,
    min_ratio: f64,
    decay: f64,
    rng: StdRng,
}

impl Sglang {
    /// An idle scheduler.
    pub fn new(cfg: EngineConfig, store: Arc<TokenStore>) -> Self {
        let init = (INIT_RATIO * cfg.schedule_conservativeness).min(1.0);
        let min_ratio = (init * MIN_RATIO_FACTOR).min(1.0);
        Self {
            cfg,
            store,
            waiting: Vec::new(),
            running: Vec::new(),
            prefilled: Vec::new(),
            chunked: None,
            batch_is_full: false,
            ratio: init,
            min_ratio,
            decay: (init - min_ratio) / DECAY_STEPS,
            rng: StdRng::seed_from_u64(cfg.seed),
        }
    }

    fn page(&self) -> u64 {
        self.cfg.page_size.max(1) as u64
    }

    /// Remaining outputs a request may still produce (ignore-EOS: exactly its output length).
    fn remaining_new(r: &ReqRt) -> u64 {
        r.output_len.saturating_sub(r.generated) as u64
    }

    fn order_waiting(&mut self, reqs: &[ReqRt], cache: &dyn PrefixCache) {
        match self.cfg.schedule_policy {
            SchedulePolicy::Fcfs => {}
            SchedulePolicy::Lpm => {
                if self.waiting.len() <= LPM_FALLBACK_WAITING {
                    // In-batch prefix deprioritisation: a request with little cached that shares
                    // ≥ 32 tokens with an earlier waiting request waits for that one to be cached.
                    let mut in_queue = crate::cache::tree::RadixTree::new(1);
                    let keys: Vec<(usize, ReqId)> = self
                        .waiting
                        .iter()
                        .map(|&id| {
                            let r = &reqs[id as usize];
                            let len = r.num_tokens as usize;
                            let hit = cache.peek(r.seq, len);
                            if hit <= IN_BATCH_CHECK {
                                if in_queue.peek(&self.store, r.seq, len) >= IN_BATCH_DEPRIORITIZE {
                                    return (usize::MAX, id);
                                }
                                in_queue.insert(&self.store, r.seq, len);
                            }
                            (hit, id)
                        })
                        .collect();
                    let mut keyed = keys;
                    // Stable sort: longest hit first, deprioritised (usize::MAX) last.
                    keyed.sort_by_key(|&(hit, _)| {
                        if hit == usize::MAX {
                            (1, std::cmp::Reverse(0))
                        } else {
                            (0, std::cmp::Reverse(hit))
                        }
                    });
                    self.waiting = keyed.into_iter().map(|(_, id)| id).collect();
                }
            }
            SchedulePolicy::DfsWeight => self.waiting = self.dfs_weight_order(reqs, cache),
            SchedulePolicy::Lof => self.waiting.sort_by_key(|&id| std::cmp::Reverse(reqs[id as usize].output_len)),
            SchedulePolicy::Random => self.waiting.shuffle(&mut self.rng),
        }
    }

    /// `dfs-weight`: each waiting request sits at the tree node ending its cached prefix; a
    /// node weighs the requests in its subtree; depth-first from the root, heavier children
    /// first (ties: the one holding the earliest waiting request), a node's own requests after
    /// its children.
    fn dfs_weight_order(&self, reqs: &[ReqRt], cache: &dyn PrefixCache) -> Vec<ReqId> {
        let items: Vec<_> = self
            .waiting
            .iter()
            .map(|&id| {
                let r = &reqs[id as usize];
                (r.seq, cache.peek(r.seq, r.num_tokens as usize))
            })
            .collect();
        let trie = build_trie(&Tokens { store: &self.store, items });
        let n = trie.nodes.len();
        let mut first = vec![usize::MAX; n];
        let mut own: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (pos, &v) in trie.end_node.iter().enumerate() {
            own[v].push(pos);
            first[v] = first[v].min(pos);
        }
        let mut by_depth: Vec<usize> = (1..n).collect();
        by_depth.sort_by_key(|&v| std::cmp::Reverse(trie.nodes[v].depth));
        for &v in &by_depth {
            let p = trie.nodes[v].parent;
            first[p] = first[p].min(first[v]);
        }
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
        for v in 1..n {
            children[trie.nodes[v].parent].push(v);
        }
        for c in &mut children {
            c.sort_by_key(|&v| (std::cmp::Reverse(trie.count[v]), first[v]));
        }
        // Iterative post-order: (node, children visited?).
        let mut out = Vec::with_capacity(self.waiting.len());
        let mut stack = vec![(0usize, false)];
        while let Some((v, done)) = stack.pop() {
            if done {
                out.extend(own[v].iter().map(|&pos| self.waiting[pos]));
            } else {
                stack.push((v, true));
                stack.extend(children[v].iter().rev().map(|&c| (c, false)));
            }
        }
        out
    }

    /// Forms a prefill batch; false when there is none.
    fn prefill(&mut self, s: &mut Step) -> bool {
        let (now, reqs, cache, out) = (s.now, &mut *s.reqs, &mut *s.cache, &mut *s.out);
        if (self.batch_is_full || self.waiting.is_empty()) && self.chunked.is_none() {
            return false;
        }
        let u = cache.usage();
        let free = u.capacity_tokens.map_or(f64::INFINITY, |c| (c - u.used_tokens + u.evictable_tokens) as f64);
        let reserved: f64 = self
            .running
            .iter()
            .chain(&self.prefilled)
            .map(|&id| Self::remaining_new(&reqs[id as usize]).min(CLIP_MAX_NEW) as f64 * self.ratio)
            .sum();
        let mut rem_total = free - reserved;
        let mut cur_rem = free;
        let mut rem_input = self.cfg.max_prefill_tokens as f64;
        let mut rem_chunk =
            if self.cfg.chunked_prefill_size == 0 { f64::INFINITY } else { self.cfg.chunked_prefill_size as f64 };
        let page = self.page();
        // 1. The in-progress chunked request.
        if let Some(c) = self.chunked {
            let r = reqs[c as usize];
            let remaining = (r.num_tokens - r.num_computed) as u64;
            let room = rem_chunk.min(rem_total).max(0.0) as u64;
            let n = if remaining <= room { remaining } else { room / page * page };
            if n > 0 && cache.grow(c, (r.num_computed as u64 + n) as usize) {
                out.push(c, &r, n as u32);
                rem_total -= n as f64;
                cur_rem -= n as f64;
                rem_input -= n as f64;
                rem_chunk -= n as f64;
                if n == remaining {
                    self.chunked = None;
                    self.prefilled.push(c);
                }
            }
        }
        // 2. Waiting requests in policy order.
        self.order_waiting(reqs, cache);
        let mut taken = 0usize;
        let running_bs = self.running.len() + self.prefilled.len() + self.chunked.iter().count();
        while taken < self.waiting.len()
            && self.chunked.is_none()
            && rem_total > 0.0
            && cur_rem > 0.0
            && rem_input > 0.0
            && rem_chunk > 0.0
        {
            if out.items.len() >= (self.cfg.max_num_seqs as usize).saturating_sub(running_bs) {
                self.batch_is_full = true;
                break;
            }
            let id = self.waiting[taken];
            let r = reqs[id as usize];
            let known = r.num_tokens as usize;
            let hit = cache.peek(r.seq, known);
            let extend = (known - hit) as u64;
            let max_new = Self::remaining_new(&r);
            if (extend + max_new.min(CLIP_MAX_NEW)) as f64 >= rem_total {
                self.batch_is_full = true;
                break;
            }
            if (extend.div_ceil(page) * page) as f64 >= rem_input && !out.items.is_empty() {
                break;
            }
            let whole = (extend as f64) <= rem_chunk;
            let n = if whole { extend } else { (rem_chunk as u64) / page * page };
            if n == 0 {
                break;
            }
            let Some(a) = cache.admit(id, r.seq, known, n as usize) else {
                self.batch_is_full = true;
                break;
            };
            reqs[id as usize].admitted_with(a.hit_tokens, now);
            let rr = reqs[id as usize];
            let n = (a.allocated_tokens - a.hit_tokens) as u64;
            out.push(id, &rr, n as u32);
            taken += 1;
            rem_input -= n as f64;
            rem_chunk -= n as f64;
            cur_rem -= n as f64;
            if whole {
                rem_total -= (extend + max_new.min(CLIP_MAX_NEW)) as f64;
                self.prefilled.push(id);
            } else {
                rem_total -= n as f64;
                self.chunked = Some(id);
            }
        }
        self.waiting.drain(..taken);
        !out.items.is_empty()
    }

    /// Retracts requests until one more token each fits; returns how many were retracted.
    fn make_decode_room(&mut self, reqs: &mut [ReqRt], cache: &mut dyn PrefixCache) -> u32 {
        let page = self.page();
        let mut retracted = 0;
        loop {
            let need: u64 =
                self.running.iter().filter(|&&id| (reqs[id as usize].num_computed as u64).is_multiple_of(page)).count()
                    as u64
                    * page;
            let u = cache.usage();
            let room = u.capacity_tokens.map_or(u64::MAX, |c| c - u.used_tokens + u.evictable_tokens);
            if room >= need || self.running.len() <= 1 {
                return retracted;
            }
            // Victim: fewest outputs, then longest prompt.
            let (pos, _) = self
                .running
                .iter()
                .enumerate()
                .min_by_key(|(_, &id)| {
                    let r = &reqs[id as usize];
                    (r.generated, std::cmp::Reverse(r.prompt_len), std::cmp::Reverse(id))
                })
                .expect("more than one running request");
            let victim = self.running.remove(pos);
            cache.preempt(victim);
            reqs[victim as usize].preempted();
            self.waiting.push(victim);
            self.batch_is_full = false;
            retracted += 1;
            let (out_sum, max_sum) = self.running.iter().fold((0u64, 0u64), |(o, m), &id| {
                let r = &reqs[id as usize];
                (o + r.generated as u64, m + r.output_len as u64)
            });
            self.ratio =
                ((out_sum as f64 + RETRACT_DECODE_STEPS * self.running.len() as f64) / (max_sum as f64 + 1.0)).min(1.0);
        }
    }

    fn decode(&mut self, s: &mut Step) {
        let (reqs, cache, out) = (&mut *s.reqs, &mut *s.cache, &mut *s.out);
        let retracted = self.make_decode_room(reqs, cache);
        out.preempted += retracted;
        let mut i = 0;
        while i < self.running.len() {
            let id = self.running[i];
            let r = reqs[id as usize];
            if cache.grow(id, r.num_computed as usize + 1) {
                out.push(id, &r, 1);
                i += 1;
            } else {
                // A page boundary the room check did not foresee: retract this one too.
                self.running.remove(i);
                cache.preempt(id);
                reqs[id as usize].preempted();
                self.waiting.push(id);
                out.preempted += 1;
            }
        }
        if retracted == 0 {
            self.ratio = (self.ratio - self.decay).max(self.min_ratio);
        }
    }
}

impl Scheduler for Sglang {
    fn enqueue(&mut self, id: ReqId) {
        self.waiting.push(id);
    }

    fn schedule(&mut self, s: &mut Step) {
        s.out.clear();
        self.running.append(&mut self.prefilled);
        if self.prefill(s) {
            return;
        }
        self.decode(s);
    }

    fn finished(&mut self, id: ReqId) {
        self.running.retain(|&x| x != id);
        self.prefilled.retain(|&x| x != id);
        self.batch_is_full = false;
    }

    fn queued(&self) -> (usize, usize) {
        (self.waiting.len(), self.running.len() + self.prefilled.len() + self.chunked.iter().count())
    }

    fn reject_head(&mut self) -> Option<ReqId> {
        self.batch_is_full = false;
        (!self.waiting.is_empty()).then(|| self.waiting.remove(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::radix::TreeCache;
    use crate::engine::EngineKind;

    fn cfg(policy: SchedulePolicy) -> EngineConfig {
        EngineConfig {
            engine: EngineKind::Sglang,
            version: crate::engine::EngineVersion::newest(EngineKind::Sglang),
            rules: crate::engine::EngineVersion::newest(EngineKind::Sglang).rules(),
            max_num_seqs: 64,
            max_num_batched_tokens: 16384,
            enable_chunked_prefill: true,
            long_prefill_token_threshold: 0,
            chunked_prefill_size: 8192,
            max_prefill_tokens: 16384,
            schedule_policy: policy,
            schedule_conservativeness: 1.0,
            page_size: 1,
            seed: 0,
            overlap: false,
        }
    }

    /// Waiting: x (shares prefix P2), a, b, c (share P1), z (no hit). dfs-weight visits the
    /// heavier P1 subtree first, then P2, and the root's own request last; LPM sorts by hit.
    #[test]
    fn dfs_weight_and_lpm_orders() {
        let p1: Vec<u32> = (0..20).collect();
        let p2: Vec<u32> = (100..110).collect();
        let with = |p: &[u32], tail: u32| -> Vec<u32> { p.iter().copied().chain([tail, tail + 1]).collect() };
        let seqs = vec![
            p1.clone(),
            p2.clone(),
            with(&p2, 500),
            with(&p1, 600),
            with(&p1, 700),
            with(&p1, 800),
            vec![900, 901],
        ];
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
        lpm.order_waiting(&reqs, &cache);
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
        let cache = TreeCache::sglang(store.clone(), 1, None);
        let reqs: Vec<ReqRt> = seqs.iter().enumerate().map(|(i, s)| ReqRt::new(i as u32, s.len() as u32, 1)).collect();
        let mut lpm = Sglang::new(cfg(SchedulePolicy::Lpm), store);
        lpm.waiting = vec![0, 2, 1];
        lpm.order_waiting(&reqs, &cache);
        assert_eq!(lpm.waiting, vec![0, 1, 2]);
    }
}
