//! `prefix-hash`: vLLM production-stack's prefix-aware routing
//! (`src/vllm_router/routers/routing_logic.py`, `PrefixAwareRouter.route_request`;
//! `src/vllm_router/prefix/hashtrie.py`, `HashTrie`). The prompt text is cut into
//! `chunk_size` = 128-character chunks (the last one may be shorter), each hashed alone; a trie
//! of chunk hashes records at every node the endpoints that were sent a prompt passing
//! through it (the root holds every endpoint ever chosen). Routing walks the trie from the
//! root with the available endpoints: at each chunk whose node exists and shares an endpoint
//! with the current set, the set shrinks to that intersection and the match grows by 128
//! characters (`match_length += chunk_size`, also for a short last chunk); the walk stops at
//! a missing node or an empty intersection. The endpoint is a uniform random choice among the
//! survivors (all endpoints when nothing matched), unless `match_length <
//! prefix_min_match_length`, when the least-loaded endpoint is taken (the router's in-flight
//! count; production-stack's current fallback after its QPS fallback latched bad picks).
//! Either way the prompt is then inserted under the chosen endpoint. No eviction, no load
//! awareness otherwise. Text = token ids rendered at `chars_per_token` ([`super::text`]);
//! xxhash64 is replaced by content fingerprints (same equality, modulo collisions).

use super::text::{chunks, members, Sets};
use super::{least_loaded, Arrival, Basis, Decision, InstanceView, Router, RouterParams};
use crate::cache::ReqId;
use rand::{Rng, SeedableRng};
use rustc_hash::FxHashMap;

/// production-stack's prefix-aware router.
pub struct PrefixHash {
    n: usize,
    chars_per_token: u32,
    chunk_chars: u32,
    min_match: u64,
    /// (parent node, chunk key) → child node; node 0 is the root.
    children: FxHashMap<(u32, u64), u32>,
    nodes: u32,
    endpoints: Sets,
    load: Vec<u32>,
    rng: rand::rngs::StdRng,
    keys: Vec<(u64, u64)>,
    selected: Vec<u64>,
    survivors: Vec<usize>,
}

impl PrefixHash {
    /// The policy for `n` instances.
    pub fn new(p: RouterParams, n: usize) -> Self {
        let mut endpoints = Sets::new(n);
        endpoints.ensure(0);
        PrefixHash {
            n,
            chars_per_token: p.chars_per_token.max(1),
            chunk_chars: p.prefix_chunk_chars.max(1),
            min_match: p.prefix_min_match_length,
            children: FxHashMap::default(),
            nodes: 1,
            endpoints,
            load: vec![0; n],
            rng: rand::rngs::StdRng::seed_from_u64(p.seed),
            keys: Vec::new(),
            selected: Vec::new(),
            survivors: Vec::new(),
        }
    }

    /// Trie nodes (the root included).
    pub fn num_nodes(&self) -> usize {
        self.nodes as usize
    }

    /// Walks the trie with every endpoint available: (`match_length` in characters as
    /// production-stack counts it, characters the matched chunks really hold); leaves the
    /// surviving set in `self.selected`.
    fn longest_prefix_match(&mut self) -> (u64, u64) {
        let words = self.endpoints.words();
        self.selected.clear();
        self.selected.resize(words, 0);
        for i in 0..self.n {
            self.selected[i / 64] |= 1 << (i % 64);
        }
        let (mut match_length, mut real) = (0, 0);
        let mut node = 0u32;
        for &(key, chars) in &self.keys {
            let Some(&child) = self.children.get(&(node, key)) else { break };
            let set = self.endpoints.get(child as usize);
            if set.iter().zip(&self.selected).all(|(a, b)| a & b == 0) {
                break;
            }
            for (s, a) in self.selected.iter_mut().zip(set) {
                *s &= a;
            }
            match_length += self.chunk_chars as u64;
            real += chars;
            node = child;
        }
        (match_length, real)
    }

    fn insert(&mut self, endpoint: usize) {
        self.endpoints.insert(0, endpoint);
        let mut node = 0u32;
        for &(key, _) in &self.keys {
            node = match self.children.get(&(node, key)) {
                Some(&c) => c,
                None => {
                    let c = self.nodes;
                    self.nodes += 1;
                    self.endpoints.clear(c as usize);
                    self.children.insert((node, key), c);
                    c
                }
            };
            self.endpoints.insert(node as usize, endpoint);
        }
    }
}

impl Router for PrefixHash {
    fn route(&mut self, a: &Arrival<'_>, _view: &dyn InstanceView) -> Decision {
        self.keys.clear();
        let it = chunks(a.store, a.seq, a.prompt_len, self.chars_per_token, self.chunk_chars, false);
        self.keys.extend(it.map(|c| (c.key, c.chars)));
        let (match_length, real) = self.longest_prefix_match();
        let (instance, basis) = if match_length < self.min_match {
            (least_loaded(&self.load), Basis::Load)
        } else {
            self.survivors.clear();
            self.survivors.extend(members(&self.selected));
            let pick = self.survivors[self.rng.random_range(0..self.survivors.len())];
            (pick, if match_length > 0 { Basis::Prefix } else { Basis::Load })
        };
        // The matched chunks are on every survivor; a fallback choice may not be one of them.
        let on_chosen = self.selected.get(instance / 64).is_some_and(|w| w & (1 << (instance % 64)) != 0);
        let predicted = if on_chosen { real / self.chars_per_token as u64 } else { 0 };
        self.insert(instance);
        self.load[instance] += 1;
        Decision { instance, basis, predicted_hit_tokens: predicted }
    }

    fn finished(&mut self, _id: ReqId, instance: usize, _now: f64) {
        self.load[instance] -= 1;
    }
    fn in_flight(&self) -> Option<Vec<u32>> {
        Some(self.load.clone())
    }
}
