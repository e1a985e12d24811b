//! `aibrix`: the AIBrix gateway's `prefix-cache` policy
//! (`pkg/plugins/gateway/algorithms/prefix_cache.go`, `prefixCacheRouter.Route`;
//! `pkg/utils/prefixcacheindexer/hash.go`, `PrefixHashTable`; `prefix_cache_readme.md`). With
//! the default `character` tokenizer the prompt is cut into blocks of
//! `AIBRIX_PREFIX_CACHE_BLOCK_SIZE` = 128 characters; only full blocks are hashed, each hash
//! chained on its parent's (`getPrefixHashes`). The index is an LRU store of
//! `AIBRIX_PREFIX_CACHE_BLOCK_NUMBER` = 200,000 blocks, block → pods holding it, whose entries
//! expire `AIBRIX_PREFIX_CACHE_EVICTION_DURATION_MINS` = 20 min after their last use. Per
//! request:
//!
//! 1. the pods' running requests (the gateway's own in-flight count); if
//!    `max − min > AIBRIX_PREFIX_CACHE_POD_RUNNING_REQUEST_IMBALANCE_ABS_COUNT` (code default 8;
//!    the readme says 16) only the pods at `min` are considered (`getTargetPodListOnLoadImbalance`);
//! 2. walk the block hashes in order (`seqSearchPrefix`): stop at a block missing from the index
//!    or held by none of the considered pods; every considered pod holding block `i` scores
//!    `(i + 1) × 100 / blocks` (integer %, the deepest such block counts);
//! 3. matched pods sorted by score descending, then running ascending (ties in random order:
//!    the code shuffles before a stable sort); the first whose running ≤ mean + f × σ of all
//!    pods' running (population σ, `AIBRIX_PREFIX_CACHE_STANDARD_DEVIATION_FACTOR` f, code
//!    default 1) is chosen (`getTargetPodFromMatchedPods`);
//! 4. otherwise the pod with the fewest running requests (ties at random);
//! 5. all the request's block hashes are added under the chosen pod (`AddPrefix`).
//!
//! Text = token ids rendered at `chars_per_token` ([`super::text`]); xxhash64 is replaced by
//! content fingerprints chained with a 64-bit mix (same equality, modulo collisions). The
//! index's 1-second expiry sweep is exact here: entries expire in LRU order, so the sweep pops
//! the stale tail before each request.

use super::text::{chunks, members, mix, Sets};
use super::{load_range, Arrival, Basis, Decision, InstanceView, Router, RouterParams};
use crate::cache::ReqId;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rustc_hash::FxHashMap;

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Slot {
    key: u64,
    prev: u32,
    next: u32,
    last_use: f64,
}

/// An LRU map from block hash to the set of pods holding it, with expiry.
#[derive(Debug)]
pub struct BlockIndex {
    capacity: usize,
    ttl: f64,
    map: FxHashMap<u64, u32>,
    slots: Vec<Slot>,
    pods: Sets,
    free: Vec<u32>,
    /// Most recently used.
    head: u32,
    /// Least recently used.
    tail: u32,
}

impl BlockIndex {
    /// An empty index of `capacity` blocks over `n` pods, entries living `ttl` seconds unused.
    pub fn new(capacity: usize, ttl: f64, n: usize) -> Self {
        BlockIndex {
            capacity: capacity.max(1),
            ttl,
            map: FxHashMap::default(),
            slots: Vec::new(),
            pods: Sets::new(n),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
        }
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no block is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    fn unlink(&mut self, s: u32) {
        let Slot { prev, next, .. } = self.slots[s as usize];
        match prev {
            NIL => self.head = next,
            p => self.slots[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            x => self.slots[x as usize].prev = prev,
        }
    }

    fn push_front(&mut self, s: u32) {
        self.slots[s as usize].prev = NIL;
        self.slots[s as usize].next = self.head;
        if self.head != NIL {
            self.slots[self.head as usize].prev = s;
        }
        self.head = s;
        if self.tail == NIL {
            self.tail = s;
        }
    }

    fn remove_tail(&mut self) {
        let s = self.tail;
        self.unlink(s);
        self.map.remove(&self.slots[s as usize].key);
        self.free.push(s);
    }

    /// Drops the entries unused for longer than the expiry (the LRU tail).
    pub fn expire(&mut self, now: f64) {
        while self.tail != NIL && now - self.slots[self.tail as usize].last_use > self.ttl {
            self.remove_tail();
        }
    }

    /// The pods holding `key`, if it is held, without refreshing its use. The router's walk
    /// uses it: upstream's `Get` refreshes the walked blocks, but every one of them is added
    /// again, in the same order and at the same time, before any block can leave (the adds
    /// re-touch the walked prefix first), so the LRU order and times end up the same.
    pub fn peek(&self, key: u64) -> Option<&[u64]> {
        self.map.get(&key).map(|&s| self.pods.get(s as usize))
    }

    /// The pods holding `key` (refreshing its use), if it is held.
    pub fn get(&mut self, key: u64, now: f64) -> Option<&[u64]> {
        let s = *self.map.get(&key)?;
        self.unlink(s);
        self.push_front(s);
        self.slots[s as usize].last_use = now;
        Some(self.pods.get(s as usize))
    }

    /// Records that `pod` holds `key`, evicting the least recently used block when full.
    pub fn add(&mut self, key: u64, pod: usize, now: f64) {
        let s = match self.map.get(&key) {
            Some(&s) => {
                self.unlink(s);
                s
            }
            None => {
                if self.map.len() >= self.capacity {
                    self.remove_tail();
                }
                let slot = Slot { key, prev: NIL, next: NIL, last_use: now };
                let s = match self.free.pop() {
                    Some(s) => {
                        self.slots[s as usize] = slot;
                        s
                    }
                    None => {
                        self.slots.push(slot);
                        (self.slots.len() - 1) as u32
                    }
                };
                self.pods.clear(s as usize);
                self.map.insert(key, s);
                s
            }
        };
        self.push_front(s);
        self.slots[s as usize].last_use = now;
        self.pods.insert(s as usize, pod);
    }
}

/// AIBrix's prefix-cache router.
pub struct Aibrix {
    chars_per_token: u32,
    block_chars: u32,
    abs_count: u32,
    sigma_factor: f64,
    index: BlockIndex,
    running: Vec<u32>,
    rng: rand::rngs::StdRng,
    hashes: Vec<u64>,
    /// Per pod: deepest matched block + 1 (0 = no match).
    matched: Vec<u32>,
    considered: Vec<bool>,
    order: Vec<usize>,
    /// Refresh the walked blocks as upstream's `Get` does (tests only: the result is the same).
    refresh_walk: bool,
}

impl Aibrix {
    /// The policy for `n` instances.
    pub fn new(p: RouterParams, n: usize) -> Self {
        Aibrix {
            chars_per_token: p.chars_per_token.max(1),
            block_chars: p.aibrix_block_chars.max(1),
            abs_count: p.aibrix_imbalance_abs_count,
            sigma_factor: p.aibrix_std_dev_factor,
            index: BlockIndex::new(p.aibrix_block_number as usize, p.aibrix_eviction_secs, n),
            running: vec![0; n],
            rng: rand::rngs::StdRng::seed_from_u64(p.seed),
            hashes: Vec::new(),
            matched: vec![0; n],
            considered: vec![true; n],
            order: Vec::with_capacity(n),
            refresh_walk: false,
        }
    }

    /// Blocks in the index.
    pub fn index_len(&self) -> usize {
        self.index.len()
    }

    /// The pod with the fewest running requests, ties at random.
    fn least_running(&mut self, view: &dyn InstanceView) -> usize {
        let (min, _) = load_range(&self.running, view);
        self.order.clear();
        self.order.extend((0..self.running.len()).filter(|&i| view.available(i) && self.running[i] == min));
        self.order[self.rng.random_range(0..self.order.len())]
    }

    /// Step 3: the first matched pod by score then load within mean + f × σ.
    fn pick_matched(&mut self, num_blocks: usize, view: &dyn InstanceView) -> Option<usize> {
        let ready = || (0..self.running.len()).filter(|&i| view.available(i)).map(|i| self.running[i] as f64);
        let n = ready().count() as f64;
        let mean = ready().sum::<f64>() / n;
        let var = ready().map(|r| (r - mean).powi(2)).sum::<f64>() / n;
        let limit = mean + self.sigma_factor * var.sqrt();
        let score = |m: u32| (m as usize * 100 / num_blocks.max(1)) as u32;
        self.order.clear();
        self.order.extend((0..self.running.len()).filter(|&i| self.matched[i] > 0));
        self.order.shuffle(&mut self.rng);
        let (matched, running) = (&self.matched, &self.running);
        self.order.sort_by(|&a, &b| score(matched[b]).cmp(&score(matched[a])).then(running[a].cmp(&running[b])));
        self.order.iter().copied().find(|&i| running[i] as f64 <= limit)
    }
}

impl Router for Aibrix {
    fn route(&mut self, a: &Arrival<'_>, view: &dyn InstanceView) -> Decision {
        self.index.expire(a.now);
        // Over the ready pods: a failed one is out of the candidates until it is back.
        let (min, max) = load_range(&self.running, view);
        let imbalanced = max - min > self.abs_count;
        for (i, (c, &r)) in self.considered.iter_mut().zip(&self.running).enumerate() {
            *c = view.available(i) && (!imbalanced || r == min);
        }
        // Chained hashes of the full blocks.
        self.hashes.clear();
        let mut parent = 0u64;
        for c in chunks(a.store, a.seq, a.prompt_len, self.chars_per_token, self.block_chars, true) {
            parent = mix(parent.rotate_left(17) ^ c.key);
            self.hashes.push(parent);
        }
        self.matched.fill(0);
        let mut any = false;
        for (i, &h) in self.hashes.iter().enumerate() {
            let found = if self.refresh_walk { self.index.get(h, a.now) } else { self.index.peek(h) };
            let Some(pods) = found else { break };
            let mut hit = false;
            for p in members(pods) {
                if self.considered[p] {
                    self.matched[p] = i as u32 + 1;
                    hit = true;
                }
            }
            if !hit {
                break;
            }
            any = true;
        }
        let chosen = if any { self.pick_matched(self.hashes.len(), view) } else { None };
        let (instance, basis) = match chosen {
            Some(p) => (p, Basis::Prefix),
            None => (self.least_running(view), Basis::Load),
        };
        // The matched blocks' characters, in whole tokens.
        let predicted = self.matched[instance] as u64 * self.block_chars as u64 / self.chars_per_token as u64;
        for &h in &self.hashes {
            self.index.add(h, instance, a.now);
        }
        self.running[instance] += 1;
        Decision { instance, basis, predicted_hit_tokens: predicted }
    }

    fn finished(&mut self, _id: ReqId, instance: usize, _now: f64) {
        self.running[instance] -= 1;
    }
    fn in_flight(&self) -> Option<Vec<u32>> {
        Some(self.running.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::TokenStore;

    struct NoView;
    impl InstanceView for NoView {
        fn num_instances(&self) -> usize {
            3
        }
        fn cached_prefix(&self, _i: usize, _seq: crate::workload::SeqId, _known: usize) -> usize {
            0
        }
        fn held_tokens(&self, _i: usize) -> u64 {
            0
        }
        fn queued(&self, _i: usize) -> u32 {
            0
        }
    }

    /// Routes prompt `seq` with the pods' running counts set to `running` first.
    fn route(r: &mut Aibrix, store: &TokenStore, seq: u32, running: [u32; 3]) -> Decision {
        r.running = running.to_vec();
        r.route(
            &Arrival { id: seq, seq, prompt_len: store.seq_len(seq), store, now: 0.0, lora: 0, priority: None },
            &NoView,
        )
    }

    #[test]
    fn matched_pod_must_be_within_mean_plus_f_sigma_and_imbalance_narrows_the_candidates() {
        // 64 tokens at 4 characters = 256 characters = two 128-character blocks.
        let p: Vec<u32> = (1..=64).collect();
        let store = TokenStore::from_seqs(&[p.clone(), p.clone(), p.clone(), p]);
        let mut r = Aibrix::new(RouterParams::default(), 3);
        // Nothing indexed: the least-running pod, 0.
        let d = route(&mut r, &store, 0, [0, 3, 3]);
        assert_eq!((d.instance, d.basis, d.predicted_hit_tokens), (0, Basis::Load, 0));
        assert_eq!(r.index_len(), 2);
        // Running 9, 3, 4: mean 5.33, σ 2.62, limit (f = 1) 7.96 < 9: pod 0 is skipped and the
        // least-running pod, 1, is taken.
        let d = route(&mut r, &store, 1, [9, 3, 4]);
        assert_eq!((d.instance, d.basis), (1, Basis::Load));
        // f = 2: limit 10.58 ≥ 9, pod 0 holds 100 % (now tied with pod 1, which runs fewer).
        r.sigma_factor = 2.0;
        let d = route(&mut r, &store, 2, [9, 3, 4]);
        assert_eq!((d.instance, d.basis, d.predicted_hit_tokens), (1, Basis::Prefix, 64));
        // Running 12, 4, 2: 12 − 2 > 8, so only the pods at the minimum count: pod 2 holds no
        // block, nothing matches, and pod 2 is the least running (pod 1 would win otherwise).
        let d = route(&mut r, &store, 3, [12, 4, 2]);
        assert_eq!((d.instance, d.basis, d.predicted_hit_tokens), (2, Basis::Load, 0));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Peeking during the walk leaves the same decisions and the same index as refreshing
        /// every walked block, also when the index is full and blocks expire.
        #[test]
        fn peeking_walk_equals_refreshing_walk(
            prompts in proptest::collection::vec((0usize..3, 1usize..200, 0u32..5), 1..40),
            capacity in 1u32..12,
        ) {
            let base: Vec<u32> = (1..=150).collect();
            let mut store = TokenStore::new();
            let mut ids = Vec::new();
            for (t, len, _) in &prompts {
                let full: Vec<u32> = base.iter().copied().chain((0..60).map(|i| 1000 * (*t as u32 + 1) + i)).collect();
                store.begin_seq();
                store.push_tokens(&full[..(*len).min(full.len())]);
                ids.push(store.end_seq());
            }
            let p = RouterParams {
                aibrix_block_number: capacity,
                aibrix_eviction_secs: 3.0,
                aibrix_imbalance_abs_count: 1,
                seed: 5,
                ..RouterParams::default()
            };
            let (mut fast, mut slow) = (Aibrix::new(p, 3), Aibrix::new(p, 3));
            slow.refresh_walk = true;
            let mut now = 0.0;
            for (k, &s) in ids.iter().enumerate() {
                now += prompts[k].2 as f64;
                let a = Arrival { id: s, seq: s, prompt_len: store.seq_len(s), store: &store, now, lora: 0, priority: None };
                let (d1, d2) = (fast.route(&a, &NoView), slow.route(&a, &NoView));
                proptest::prop_assert_eq!(d1, d2);
                proptest::prop_assert_eq!(fast.index_len(), slow.index_len());
                if k % 3 == 2 {
                    fast.finished(s, d1.instance, now);
                    slow.finished(s, d2.instance, now);
                }
            }
            let order = |ix: &BlockIndex| {
                let (mut v, mut s) = (Vec::new(), ix.head);
                while s != NIL {
                    v.push((ix.slots[s as usize].key, ix.slots[s as usize].last_use, ix.pods.get(s as usize).to_vec()));
                    s = ix.slots[s as usize].next;
                }
                v
            };
            proptest::prop_assert_eq!(order(&fast.index), order(&slow.index));
        }
    }

    #[test]
    fn blocks_expire_after_their_time_and_the_index_keeps_its_capacity() {
        let mut ix = BlockIndex::new(2, 10.0, 2);
        ix.add(1, 0, 0.0);
        ix.add(2, 1, 5.0);
        ix.add(3, 1, 6.0); // over capacity: block 1 (least recently used) leaves
        assert_eq!(ix.len(), 2);
        assert!(ix.get(1, 6.0).is_none());
        assert_eq!(ix.get(2, 7.0), Some(&[0b10u64][..]));
        ix.expire(16.5); // block 3 last used at 6: gone; block 2 at 7: kept
        assert_eq!(ix.len(), 1);
        assert!(ix.get(3, 16.5).is_none());
        assert!(ix.get(2, 16.5).is_some());
    }
}
