//! `kv-aware`: NVIDIA Dynamo's KV router (`lib/llm/src/kv_router/scheduler.rs`,
//! `DefaultWorkerSelector::select_worker`; `KvRouterConfig::default()` in `config.rs`). Dynamo
//! learns each worker's cached blocks from its KV events; cachesim reads them directly through
//! [`InstanceView::cached_prefix`] (an idealised, event-lag-free indexer). Per instance:
//!
//! * overlap = whole cached blocks of the prompt (`cached_prefix / block_size`);
//! * prefill tokens = the router's own count of tokens still to prefill on the instance
//!   (Dynamo's `ActiveSequences`, `router_track_active_blocks`) + this request's
//!   `prompt − overlap × block_size`;
//! * decode blocks = the blocks of the prompts in flight on the instance with this one added,
//!   shared prefixes counted once (Dynamo's `router_assume_kv_reuse`, default true):
//!   `⌈(distinct in-flight tokens + prompt − prompt tokens already in flight) / block_size⌉`
//!   ([`super::active::ActiveTrie`]);
//! * cost (Dynamo's "logit") = `overlap_score_weight × prefill tokens / block_size + decode
//!   blocks`, and the lowest cost wins (`router_temperature` 0: `softmax_sample` returns every
//!   minimum); ties go to the smallest cached tree ([`InstanceView::cached_blocks`]), then to a
//!   seeded uniform choice.
//!
//! The decision counts as routed by prefix when the chosen instance holds more cached blocks
//! of the prompt than the instance holding fewest (a prefix cached everywhere decides
//! nothing), by load otherwise; its predicted hit tokens are the chosen instance's blocks.
//!
//! **Event lag** (`--kv-event-delay-ms D`): Dynamo's indexer learns a worker's blocks from its
//! KV events, which vLLM publishes after each step (`Scheduler.update_from_output`, 0.33:
//! `kv_cache_manager.take_events()`, `BlockStored` for the blocks cached while the step was
//! scheduled, `BlockRemoved` for those evicted) and which reach the router D ms later. With the
//! flag, each instance's overlap is read from the router's own index ([`super::kv_index`]: the content
//! keys its events stored and not yet removed), as it stood D ms after the last step that
//! ended: a prefix cached in the step in flight is not seen yet, and one evicted since is still
//! seen — the router sends work to a cache that no longer holds it. The tree size that breaks
//! ties is the index's. Without the flag the overlap is read from the caches as they are.
//!
//! Both load terms are router-tracked, as in Dynamo (not the engines' true occupancy). A
//! request's prefill tokens leave its instance's count at [`Router::prefill_done`] (Dynamo's
//! `mark_prefill_completed`), or at `finished` when the driver never reports a first token.
//! Dynamo counts blocks by hash (each sequence's partial last block its own); cachesim counts
//! the distinct in-flight tokens in blocks, which draws the same way: a worker already running
//! a prompt's prefix adds fewer blocks, so a burst of same-prefix requests gathers before any
//! of them is cached.

use super::active::ActiveTrie;
use super::kv_index::KvEvents;
use super::{Arrival, Basis, Decision, InstanceView, Router, RouterParams};
use crate::cache::ReqId;
use rand::{Rng, SeedableRng};
use rustc_hash::FxHashMap;

/// What the router remembers of a request in flight.
#[derive(Debug, Clone, Copy)]
struct Active {
    instance: usize,
    prefill_tokens: u64,
    /// End node of its prompt in the instance's in-flight trie.
    end: u32,
}

/// Dynamo's KV router over the instances' true caches.
pub struct KvAware {
    weight: f64,
    block: u64,
    prefill_tokens: Vec<u64>,
    in_flight: Vec<ActiveTrie>,
    active: FxHashMap<ReqId, Active>,
    rng: rand::rngs::StdRng,
    ties: Vec<usize>,
    overlaps: Vec<u64>,
    /// With `--kv-event-delay-ms`: the instances' KV events as the indexer receives them.
    events: Option<KvEvents>,
    keys: Vec<u32>,
}

impl KvAware {
    /// The policy for `n` instances.
    pub fn new(p: RouterParams, n: usize) -> Self {
        KvAware {
            weight: p.overlap_score_weight,
            block: p.kv_block_size.max(1) as u64,
            prefill_tokens: vec![0; n],
            in_flight: (0..n).map(|_| ActiveTrie::default()).collect(),
            active: FxHashMap::default(),
            rng: rand::rngs::StdRng::seed_from_u64(p.seed),
            ties: Vec::with_capacity(n),
            overlaps: Vec::with_capacity(n),
            events: p.kv_event_delay_ms.map(|d| KvEvents::new(d, n)),
            keys: Vec::new(),
        }
    }

    /// Blocks the router believes instance `i` holds: its index's with events, else the cache's.
    fn tree_size(&self, i: usize, view: &dyn InstanceView) -> u64 {
        match &self.events {
            Some(e) => e.blocks(i),
            None => view.cached_blocks(i),
        }
    }

    /// Tokens still to prefill and distinct in-flight prompt tokens per instance, as the
    /// router counts them.
    pub fn tracked(&self) -> (Vec<u64>, Vec<u64>) {
        (self.prefill_tokens.clone(), self.in_flight.iter().map(|t| t.tokens()).collect())
    }

    /// Cost of sending a prompt of `isl` tokens with `overlap` cached blocks, `shared` of its
    /// tokens already in flight there, to instance `i`.
    pub fn cost(&self, i: usize, isl: u64, overlap: u64, shared: u64) -> f64 {
        let prefill = self.prefill_tokens[i] + isl - (overlap * self.block).min(isl);
        let decode = (self.in_flight[i].tokens() + isl - shared.min(isl)).div_ceil(self.block);
        self.weight * (prefill as f64 / self.block as f64) + decode as f64
    }
}

impl Router for KvAware {
    fn route(&mut self, a: &Arrival<'_>, view: &dyn InstanceView) -> Decision {
        let isl = a.prompt_len as u64;
        let n = self.in_flight.len();
        self.overlaps.clear();
        self.ties.clear();
        let mut best = f64::INFINITY;
        if let Some(e) = self.events.as_mut() {
            view.block_keys(a.seq, a.prompt_len, &mut self.keys);
            e.catch_up(a.now);
        }
        for i in 0..n {
            if !view.available(i) {
                // Out of the scheduler's worker list until it registers again.
                self.overlaps.push(u64::MAX);
                continue;
            }
            let overlap = match &self.events {
                Some(e) => e.overlap(i, &self.keys),
                None => view.cached_prefix(i, a.seq, a.prompt_len) as u64 / self.block,
            };
            self.overlaps.push(overlap);
            let shared = self.in_flight[i].shared(a.store, a.seq, a.prompt_len) as u64;
            let cost = self.cost(i, isl, overlap, shared);
            if cost < best {
                best = cost;
                self.ties.clear();
            }
            if cost == best {
                self.ties.push(i);
            }
        }
        let instance = match self.ties.len() {
            1 => self.ties[0],
            _ => {
                let smallest = self.ties.iter().map(|&i| self.tree_size(i, view)).min().unwrap_or(0);
                if self.ties.iter().all(|&i| self.tree_size(i, view) == smallest) {
                    self.ties[self.rng.random_range(0..self.ties.len())]
                } else {
                    *self.ties.iter().find(|&&i| self.tree_size(i, view) == smallest).unwrap_or(&self.ties[0])
                }
            }
        };
        let hit = (self.overlaps[instance] * self.block).min(isl);
        let end = self.in_flight[instance].insert(a.store, a.seq, a.prompt_len);
        let entry = Active { instance, prefill_tokens: isl - hit, end };
        self.prefill_tokens[instance] += entry.prefill_tokens;
        self.active.insert(a.id, entry);
        // By prefix when the chosen instance holds more of the prompt than the instance holding
        // least: a prefix cached everywhere (a shared system prompt) decides nothing.
        // (A worker that is down holds u64::MAX there, never the least.)
        let least = self.overlaps.iter().copied().min().unwrap_or(0);
        let basis = if self.overlaps[instance] > least { Basis::Prefix } else { Basis::Load };
        Decision { instance, basis, predicted_hit_tokens: hit }
    }

    fn prefill_done(&mut self, id: ReqId, _instance: usize, _now: f64) {
        if let Some(e) = self.active.get_mut(&id) {
            self.prefill_tokens[e.instance] -= e.prefill_tokens;
            e.prefill_tokens = 0;
        }
    }

    fn finished(&mut self, id: ReqId, _instance: usize, _now: f64) {
        if let Some(e) = self.active.remove(&id) {
            self.prefill_tokens[e.instance] -= e.prefill_tokens;
            self.in_flight[e.instance].remove(e.end);
        }
    }
    fn in_flight(&self) -> Option<Vec<u32>> {
        let mut n = vec![0; self.in_flight.len()];
        for e in self.active.values() {
            n[e.instance] += 1;
        }
        Some(n)
    }

    fn kv_index(&mut self) -> Option<&mut KvEvents> {
        self.events.as_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{SeqId, TokenStore};

    /// Two idle instances whose caches hold nothing; a prompt of 3 blocks keyed 7, 8, 9.
    struct Keys;

    impl InstanceView for Keys {
        fn num_instances(&self) -> usize {
            2
        }
        fn cached_prefix(&self, _i: usize, _seq: SeqId, _known: usize) -> usize {
            0
        }
        fn held_tokens(&self, _i: usize) -> u64 {
            0
        }
        fn queued(&self, _i: usize) -> u32 {
            0
        }
        fn block_keys(&self, _seq: SeqId, _known: usize, out: &mut Vec<u32>) {
            out.clear();
            out.extend([7, 8, 9]);
        }
    }

    fn route(r: &mut KvAware, store: &TokenStore, id: u32, now: f64) -> Decision {
        let d = r.route(&Arrival { id, seq: 0, prompt_len: 49, store, now, lora: 0, priority: None }, &Keys);
        r.finished(id, d.instance, now);
        d
    }

    /// Instance 1's step stores blocks 7 and 8, ending at 1.0; with a 100 ms lag the router sees
    /// them from 1.1 on, and their removal (a step ending at 2.0) from 2.1 on.
    #[test]
    fn the_indexer_sees_events_after_their_delay() {
        let store = TokenStore::from_seqs(&[(0..49).collect::<Vec<u32>>()]);
        let p = RouterParams { kv_event_delay_ms: Some(100.0), kv_block_size: 16, ..RouterParams::default() };
        let mut r = KvAware::new(p, 2);
        assert_eq!(r.kv_index().map(|e| e.delay_s()), Some(0.1));
        r.kv_index().unwrap().receive(1, 1.0 + 0.1, &[(7, true), (8, true)]);
        // Before the events arrive both instances cost the same: the lighter tree, then chance.
        assert_eq!(route(&mut r, &store, 0, 1.05).predicted_hit_tokens, 0);
        let d = route(&mut r, &store, 1, 1.1);
        assert_eq!((d.instance, d.predicted_hit_tokens, d.basis), (1, 32, Basis::Prefix));
        // Removed at a step ending at 2.0: still seen at 2.05, the stale view's hit.
        r.kv_index().unwrap().receive(1, 2.0 + 0.1, &[(7, false)]);
        assert_eq!(route(&mut r, &store, 2, 2.05).predicted_hit_tokens, 32);
        // From 2.1 the first block is gone, so nothing of the prefix is left.
        assert_eq!(route(&mut r, &store, 3, 2.1).predicted_hit_tokens, 0);
        // A worker that goes down leaves the indexer with its blocks.
        r.kv_index().unwrap().receive(0, 3.0, &[(7, true)]);
        r.instance_down(0, 3.0);
        assert_eq!(route(&mut r, &store, 4, 4.0).predicted_hit_tokens, 0);
    }
}
