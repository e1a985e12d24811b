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
//! xxhash64 stands for content equality.
//!
//! How: a chunk of characters is equal in two prompts iff the tokens it covers are, so the
//! chunk trie is kept as a compressed radix tree over token ids (labels are ranges of the
//! workload's token store, children found by `(node, first token)`), split wherever an insert
//! ends or diverges. A node's endpoint set is that of the chunk whose last character falls in
//! its label; a final partial chunk equals only the same partial chunk, i.e. a prompt of the
//! same length and content, whose endpoints each node keeps apart (`ended`). Walk and insert
//! cost a few nodes per request instead of one hash per 128 characters; a test checks the
//! decisions against the literal chunk trie. Consequence of the rules worth knowing: without a
//! minimum match every trie node keeps the single endpoint its first prompt drew, so a prefix
//! stays on that endpoint forever.

use super::text::{members, Sets};
use super::{least_loaded_available, Arrival, Basis, Decision, InstanceView, Router, RouterParams};
use crate::cache::ReqId;
use crate::workload::{SeqId, Token, TokenStore};
use rand::{Rng, SeedableRng};
use rustc_hash::FxHashMap;

const ROOT: u32 = 0;

/// A node's label: `len` tokens of sequence `seq` from `off`.
#[derive(Debug, Clone, Copy)]
struct Label {
    seq: SeqId,
    off: u32,
    len: u32,
}

/// production-stack's prefix-aware router.
pub struct PrefixHash {
    n: usize,
    chars_per_token: u64,
    chunk_chars: u64,
    min_match: u64,
    labels: Vec<Label>,
    children: FxHashMap<(u32, Token), u32>,
    /// Endpoints sent a prompt through each node.
    endpoints: Sets,
    /// Endpoints sent a prompt ending exactly where each node ends.
    ended: Sets,
    load: Vec<u32>,
    rng: rand::rngs::StdRng,
    selected: Vec<u64>,
    scratch: Vec<u64>,
    survivors: Vec<usize>,
}

impl PrefixHash {
    /// The policy for `n` instances.
    pub fn new(p: RouterParams, n: usize) -> Self {
        let mut endpoints = Sets::new(n);
        let mut ended = Sets::new(n);
        endpoints.ensure(0);
        ended.ensure(0);
        PrefixHash {
            n,
            chars_per_token: p.chars_per_token.max(1) as u64,
            chunk_chars: p.prefix_chunk_chars.max(1) as u64,
            min_match: p.prefix_min_match_length,
            labels: vec![Label { seq: 0, off: 0, len: 0 }],
            children: FxHashMap::default(),
            endpoints,
            ended,
            load: vec![0; n],
            rng: rand::rngs::StdRng::seed_from_u64(p.seed),
            selected: Vec::new(),
            scratch: Vec::new(),
            survivors: Vec::new(),
        }
    }

    /// Radix nodes (the root included).
    pub fn num_nodes(&self) -> usize {
        self.labels.len()
    }

    /// `selected ∩= set`, unless that is empty (then false and `selected` is kept).
    fn narrow(selected: &mut [u64], scratch: &mut Vec<u64>, set: &[u64]) -> bool {
        scratch.clear();
        scratch.extend(selected.iter().zip(set).map(|(a, b)| a & b));
        if scratch.iter().all(|&w| w == 0) {
            return false;
        }
        selected.copy_from_slice(scratch);
        true
    }

    /// `HashTrie.longest_prefix_match` over the available endpoints (those `view` has serving):
    /// (`match_length` in characters as production-stack counts it, characters the matched
    /// chunks really hold); the survivors are left in `self.selected`.
    fn longest_prefix_match(
        &mut self,
        store: &TokenStore,
        seq: SeqId,
        len: usize,
        view: &dyn InstanceView,
    ) -> (u64, u64) {
        let (c, k) = (self.chars_per_token, self.chunk_chars);
        let chars = len as u64 * c;
        let full = chars / k;
        self.selected.clear();
        self.selected.resize(self.endpoints.words(), 0);
        for i in (0..self.n).filter(|&i| view.available(i)) {
            self.selected[i / 64] |= 1 << (i % 64);
        }
        let (mut chunk, mut node, mut pos, mut whole) = (0u64, ROOT, 0usize, true);
        'walk: while pos < len {
            let Some(&child) = self.children.get(&(node, store.token(seq, pos))) else { break };
            let l = self.labels[child as usize];
            let shared = store.lcp((seq, pos), (l.seq, l.off as usize), (l.len as usize).min(len - pos));
            let reach = (pos + shared) as u64;
            // Chunks whose last character lies in this label's matched part.
            while chunk < full && ((chunk + 1) * k).div_ceil(c) <= reach {
                if !Self::narrow(&mut self.selected, &mut self.scratch, self.endpoints.get(child as usize)) {
                    whole = false;
                    break 'walk;
                }
                chunk += 1;
            }
            node = child;
            pos += shared;
            if shared < l.len as usize {
                whole = false;
                break;
            }
        }
        let mut matched = chunk * k;
        let mut length = chunk * k;
        if chunk == full && !chars.is_multiple_of(k) && pos == len && whole {
            // The final partial chunk: only a prompt of the same length and content holds it.
            if Self::narrow(&mut self.selected, &mut self.scratch, self.ended.get(node as usize)) {
                matched = chars;
                length += k;
            }
        }
        (length, matched)
    }

    /// `HashTrie.insert` of `seq[..len]` under `endpoint`.
    fn insert(&mut self, store: &TokenStore, seq: SeqId, len: usize, endpoint: usize) {
        self.endpoints.insert(ROOT as usize, endpoint);
        let (mut node, mut pos) = (ROOT, 0usize);
        while pos < len {
            let first = store.token(seq, pos);
            let Some(&child) = self.children.get(&(node, first)) else {
                let leaf = self.labels.len() as u32;
                self.labels.push(Label { seq, off: pos as u32, len: (len - pos) as u32 });
                self.children.insert((node, first), leaf);
                self.endpoints.clear(leaf as usize);
                self.ended.clear(leaf as usize);
                self.endpoints.insert(leaf as usize, endpoint);
                self.ended.insert(leaf as usize, endpoint);
                return;
            };
            let l = self.labels[child as usize];
            let shared = store.lcp((seq, pos), (l.seq, l.off as usize), (l.len as usize).min(len - pos));
            node = if shared < l.len as usize {
                // Split: a node for the shared part takes the child's place.
                let mid = self.labels.len() as u32;
                self.labels.push(Label { seq: l.seq, off: l.off, len: shared as u32 });
                self.children.insert((node, first), mid);
                let rest = store.token(l.seq, l.off as usize + shared);
                self.children.insert((mid, rest), child);
                let lc = &mut self.labels[child as usize];
                lc.off += shared as u32;
                lc.len -= shared as u32;
                self.endpoints.copy(child as usize, mid as usize);
                self.ended.clear(mid as usize);
                mid
            } else {
                child
            };
            self.endpoints.insert(node as usize, endpoint);
            pos += shared;
        }
        self.ended.insert(node as usize, endpoint);
    }
}

impl Router for PrefixHash {
    fn route(&mut self, a: &Arrival<'_>, view: &dyn InstanceView) -> Decision {
        let (match_length, real) = self.longest_prefix_match(a.store, a.seq, a.prompt_len, view);
        let (instance, basis) = if match_length < self.min_match {
            (least_loaded_available(&self.load, view), Basis::Load)
        } else {
            self.survivors.clear();
            self.survivors.extend(members(&self.selected));
            let pick = self.survivors[self.rng.random_range(0..self.survivors.len())];
            (pick, if match_length > 0 { Basis::Prefix } else { Basis::Load })
        };
        // The matched chunks are on every survivor; a fallback choice may not be one of them.
        let on_chosen = self.selected.get(instance / 64).is_some_and(|w| w & (1 << (instance % 64)) != 0);
        let predicted = if on_chosen { real / self.chars_per_token } else { 0 };
        self.insert(a.store, a.seq, a.prompt_len, instance);
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

#[cfg(test)]
mod tests {
    use super::super::text::chunks;
    use super::*;
    use proptest::prelude::*;

    /// The literal `HashTrie`: one node per chunk hash, an endpoint set per node.
    #[derive(Default)]
    struct ChunkTrie {
        children: FxHashMap<(u32, u64), u32>,
        sets: Vec<u64>,
    }

    impl ChunkTrie {
        fn longest_prefix_match(&self, keys: &[u64], all: u64) -> (u64, u64) {
            let (mut node, mut selected, mut length) = (0u32, all, 0u64);
            for key in keys {
                let Some(&c) = self.children.get(&(node, *key)) else { break };
                if self.sets[c as usize] & selected == 0 {
                    break;
                }
                selected &= self.sets[c as usize];
                length += 128;
                node = c;
            }
            (length, selected)
        }
        fn insert(&mut self, keys: &[u64], e: usize) {
            if self.sets.is_empty() {
                self.sets.push(0);
            }
            self.sets[0] |= 1 << e;
            let mut node = 0u32;
            for key in keys {
                let next = self.sets.len() as u32;
                node = *self.children.entry((node, *key)).or_insert(next);
                if node == next {
                    self.sets.push(0);
                }
                self.sets[node as usize] |= 1 << e;
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The radix form decides as the literal chunk trie does: same match lengths, same
        /// survivors, on prompts cut from a few shared sequences at any chars per token.
        #[test]
        fn radix_trie_matches_the_chunk_trie(
            cpt in 1u32..7,
            min_match in prop_oneof![Just(0u64), 0u64..600],
            prompts in proptest::collection::vec((0usize..3, 1usize..160), 1..30),
            seed in 0u64..100,
        ) {
            let base: Vec<Token> = (1..=120).collect();
            let tails: Vec<Vec<Token>> = (0..3).map(|t| (0..60).map(|i| 1000 * (t + 1) + i).collect()).collect();
            let mut store = TokenStore::new();
            let mut ids = Vec::new();
            for (t, len) in &prompts {
                let full = [base.clone(), tails[*t].clone()].concat();
                store.begin_seq();
                store.push_tokens(&full[..(*len).min(full.len())]);
                ids.push(store.end_seq());
            }
            let n = 5;
            let p = RouterParams { chars_per_token: cpt, prefix_min_match_length: min_match, seed, ..RouterParams::default() };
            let mut fast = PrefixHash::new(p, n);
            let mut slow = ChunkTrie::default();
            for &s in &ids {
                let len = store.seq_len(s);
                let keys: Vec<u64> = chunks(&store, s, len, cpt, 128, false).map(|c| c.key).collect();
                let (want_len, want_sel) = slow.longest_prefix_match(&keys, (1 << n) - 1);
                let (got_len, _) = fast.longest_prefix_match(&store, s, len, &NoView);
                prop_assert_eq!(got_len, want_len);
                prop_assert_eq!(fast.selected[0], want_sel);
                let d = fast.route(&Arrival { id: s, seq: s, prompt_len: len, store: &store, now: 0.0, lora: 0, priority: None }, &NoView);
                slow.insert(&keys, d.instance);
            }
        }
    }

    struct NoView;
    impl InstanceView for NoView {
        fn num_instances(&self) -> usize {
            5
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
    }
}
