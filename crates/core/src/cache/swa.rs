//! SGLang's radix cache for a model with sliding-window layers (0.5.23: a `UnifiedRadixCache`
//! of FULL and SWA components over an `SWAKVPool`, `mem_cache/allocator/swa.py`
//! `SWATokenToKVPoolAllocator`): two pools, one slot in each for every token a request
//! computes; the window pool's slots of a running request's tokens that slid out of its window
//! are freed as it goes (`mem_cache/common.py` `free_swa_out_of_window_slots`: before each
//! insert, every `SGLANG_SWA_EVICTION_INTERVAL` = 128 tokens while it decodes, and with the
//! radix cache off before each prefill chunk too), and the tree keeps window KV only where a
//! later match can use it ([`super::tree::swa`]). Every allocation evicts each pool's shortfall, full
//! leaves first, then the window pool's own walk (`evict_to_free_tokens` → `evict_for_alloc`);
//! the admission budget reads both pools ([`PrefixCache::window_usage`]).
//!
//! A request's slots are counted, not named: its full slots past its locked prefix are its
//! own, and its window slots from `max(evicted, cached)` on, `evicted` being its window
//! cursor (`get_evicted_seqlen(SWA)`).

use super::tree::{swa::SwaFound, NodeId, RadixTree, ROOT};
use super::{Admitted, CacheSpec, CacheStats, Policy, PrefixCache, ReqId, ReqSlots, SlotPool, Touched, Usage};
use crate::workload::{SeqId, TokenStore};
use std::sync::Arc;

/// `SGLANG_SWA_EVICTION_INTERVAL`: a decoding request frees its window slots once this many
/// tokens slid out since the last free.
const EVICTION_INTERVAL: usize = 128;

/// The window pool of a model with sliding-window layers under SGLang.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SwaLayout {
    /// `W`: tokens a sliding-window layer attends to (SGLang's `sliding_window_size`: gpt-oss's
    /// `sliding_window − 1`; Llama 4's chunk).
    pub window: u32,
    /// Slots of the window pool (`swa_tokens_per_layer`).
    pub tokens: u64,
    /// The radix cache is on. Off (`--disable-radix-cache`), nothing is matched or inserted
    /// and a request frees its window slots down to exactly `W` behind it, at every chunk too.
    pub sharing: bool,
}

struct Req {
    seq: SeqId,
    /// Locked node ending the request's cached prefix.
    node: NodeId,
    /// Tokens covered by the tree (its locked path: `cache_protected_len`).
    cached: usize,
    /// Where its window lock ends ([`RadixTree::swa_lock`]).
    boundary: Option<usize>,
    /// Tokens it holds slots for (its slots are whole pages).
    allocated: usize,
    computed: usize,
    /// Known tokens at admission: the (re-)prefill ends there.
    prefill_end: usize,
    /// Its window slots below this are freed (`get_evicted_seqlen(SWA)`).
    evicted: usize,
    /// `swa_branching_seqlen`: the full match past its hit, where its next insert stops.
    branch: Option<usize>,
    /// Decode steps allocated since admission (`decode_batch_idx`).
    decodes: u32,
    /// Computed tokens at its last insert.
    inserted_at: usize,
}

/// SGLang's radix cache with the sliding-window component.
pub struct SwaCache {
    store: Arc<TokenStore>,
    page: usize,
    window: usize,
    /// The radix cache is on ([`SwaLayout::sharing`]).
    sharing: bool,
    tree: RadixTree,
    full: SlotPool,
    /// Full slots held by requests and not by the tree.
    private: u64,
    swa_capacity: u64,
    /// Window slots held by requests and not by the tree.
    swa_private: u64,
    reqs: ReqSlots<Req>,
    /// A request whose prefill just ended: its insert waits to learn whether it finished in
    /// that step (`release_kv_cache`, no free before the insert) or runs on (`checkpoint_kv_cache`).
    pending: Option<ReqId>,
    evicted: u64,
}

impl SwaCache {
    /// A cache of `full_tokens` full slots and `layout.tokens` window slots (both whole pages).
    pub fn new(store: Arc<TokenStore>, page_size: u32, full_tokens: u64, layout: SwaLayout) -> Self {
        let page = page_size as usize;
        let mut tree = RadixTree::new(page);
        tree.enable_swa(layout.window as usize);
        Self {
            store,
            page,
            window: layout.window as usize,
            sharing: layout.sharing,
            tree,
            full: SlotPool::new(Some(full_tokens - full_tokens % page as u64)),
            private: 0,
            swa_capacity: layout.tokens - layout.tokens % page as u64,
            swa_private: 0,
            reqs: ReqSlots::default(),
            pending: None,
            evicted: 0,
        }
    }

    fn slots_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.page) * self.page
    }

    fn floor(&self, tokens: usize) -> usize {
        tokens - tokens % self.page
    }

    fn private_of(&self, st: &Req) -> u64 {
        (self.slots_for(st.allocated) - st.cached) as u64
    }

    fn swa_private_of(&self, st: &Req) -> u64 {
        self.slots_for(st.allocated).saturating_sub(st.evicted.max(st.cached)) as u64
    }

    fn swa_used(&self) -> u64 {
        self.swa_private + self.tree.swa_size()
    }

    fn swa_available(&self) -> u64 {
        self.swa_capacity - self.swa_used()
    }

    /// `evict_to_free_tokens(n)`: each pool's shortfall, full leaves first (their window KV
    /// goes with them), then the window walk; whether both pools hold `n` free slots.
    fn make_room(&mut self, n: u64) -> bool {
        let free = self.full.available();
        if free < n {
            let freed = self.tree.evict(n - free);
            self.full.put(freed);
            self.evicted += freed;
        }
        let swa = self.swa_available();
        if swa < n {
            let (full, _) = self.tree.swa_evict(n - swa);
            self.full.put(full);
            self.evicted += full;
        }
        self.full.available() >= n && self.swa_available() >= n
    }

    fn alloc(&mut self, n: u64) -> bool {
        if !self.make_room(n) {
            return false;
        }
        self.full.take(n);
        self.private += n;
        self.swa_private += n;
        true
    }

    /// `free_swa_out_of_window_slots(req, pre_len, interval)`: the request's own window slots
    /// older than its last page-rounded window before `pre_len`, past its locked prefix, freed;
    /// its window cursor moves past them.
    fn free_window(&mut self, st: &mut Req, pre_len: usize, interval: usize) {
        if pre_len < self.window + st.evicted + interval {
            return;
        }
        let lo = st.evicted.max(st.cached);
        // A shared prefix keeps a page-rounded window, so a key ending at a page has one whole.
        let keep = if self.sharing { self.window.max(self.page).div_ceil(self.page) * self.page } else { self.window };
        let new = self.floor(lo.max(pre_len.saturating_sub(keep)));
        self.swa_private -= (new - lo) as u64;
        st.evicted = new;
    }

    /// `checkpoint_into_tree(req, up_to)`: inserts the request's first `up_to` tokens (up to its
    /// branch point, if it has one in reach), freeing its window slots out of the window first
    /// unless it `finished`, and moves its locks to the new end.
    fn insert(&mut self, st: &mut Req, up_to: usize, finished: bool) {
        if !self.sharing {
            return;
        }
        let branch = st.branch.filter(|&b| b > st.cached && b <= up_to);
        let key = branch.unwrap_or(up_to);
        if !finished && key > 0 {
            self.free_window(st, key - 1, 1);
        }
        let len = self.floor(key);
        st.inserted_at = st.computed;
        if len < st.cached {
            return;
        }
        let (present, node, adopted) = self.tree.insert_swa(&self.store, st.seq, len, st.cached, st.evicted);
        debug_assert!(present >= st.cached, "the tree lost part of a locked prefix");
        // The request's copies of [cached, present) are duplicates; its window slots of
        // [max(evicted, cached), len) went to the tree or were freed as duplicates.
        self.full.put((present - st.cached) as u64);
        self.private -= (len - st.cached) as u64;
        let held = len.saturating_sub(st.evicted.max(st.cached)) as u64;
        debug_assert!(adopted <= held, "the tree adopted window slots the request did not hold");
        self.swa_private -= held;
        self.tree.unlock(st.node);
        self.tree.swa_unlock(st.node, st.cached, st.boundary);
        self.tree.lock(node);
        st.boundary = self.tree.swa_lock(node, len);
        st.node = node;
        st.cached = len;
        if branch.is_some() {
            st.branch = None;
            if !finished {
                let computed = st.computed;
                self.free_window(st, computed.saturating_sub(1), 1);
            }
        }
    }

    /// Frees the request's own slots and unlocks its path.
    fn release(&mut self, st: Req) {
        let (private, swa) = (self.private_of(&st), self.swa_private_of(&st));
        self.full.put(private);
        self.private -= private;
        self.swa_private -= swa;
        self.tree.unlock(st.node);
        self.tree.swa_unlock(st.node, st.cached, st.boundary);
    }

    /// The deferred insert of a request whose prefill ended and which runs on.
    fn settle_pending(&mut self) {
        if let Some(req) = self.pending.take() {
            if let Some(mut st) = self.reqs.remove(req) {
                let end = st.prefill_end;
                self.insert(&mut st, end, false);
                self.reqs.put(req, st);
            }
        }
    }
}

impl PrefixCache for SwaCache {
    fn spec(&self) -> CacheSpec {
        CacheSpec {
            policy: if self.sharing { Policy::Radix } else { Policy::None },
            block_size: None,
            page_size: Some(self.page as u32),
            capacity_tokens: self.full.capacity,
            hybrid: None,
            sglang_pool: Some(super::SglangPool::Window(SwaLayout {
                window: self.window as u32,
                tokens: self.swa_capacity,
                sharing: self.sharing,
            })),
        }
    }

    fn peek(&self, seq: SeqId, known: usize) -> usize {
        self.tree.peek_swa(&self.store, seq, known.saturating_sub(1))
    }

    fn admit_reserving(
        &mut self,
        req: ReqId,
        seq: SeqId,
        known: usize,
        max_new_tokens: usize,
        _reserve_tokens: usize,
    ) -> Option<Admitted> {
        debug_assert!(!self.reqs.is_live(req), "request admitted twice");
        self.settle_pending();
        let SwaFound { hit, node, branch } = if self.sharing {
            self.tree.match_swa(&self.store, seq, known.saturating_sub(1))
        } else {
            SwaFound { hit: 0, node: ROOT, branch: None }
        };
        self.tree.lock(node);
        let boundary = self.tree.swa_lock(node, hit);
        let new = (known - hit).min(max_new_tokens);
        if !self.alloc((self.slots_for(hit + new) - hit) as u64) {
            self.tree.unlock(node);
            self.tree.swa_unlock(node, hit, boundary);
            return None;
        }
        let st = Req {
            seq,
            node,
            cached: hit,
            boundary,
            allocated: hit + new,
            computed: hit,
            prefill_end: known,
            evicted: 0,
            branch,
            decodes: 0,
            inserted_at: hit,
        };
        self.reqs.put(req, st);
        Some(Admitted { hit_tokens: hit, allocated_tokens: hit + new })
    }

    fn grow(&mut self, req: ReqId, total_tokens: usize) -> bool {
        self.settle_pending();
        let allocated = self.reqs.get(req).expect("a live request").allocated;
        if total_tokens <= allocated {
            return true;
        }
        let need = self.slots_for(total_tokens).saturating_sub(self.slots_for(allocated)) as u64;
        if !self.alloc(need) {
            return false;
        }
        self.reqs.get_mut(req).expect("a live request").allocated = total_tokens;
        true
    }

    fn computed(&mut self, req: ReqId, computed_tokens: usize) {
        self.settle_pending();
        let st = self.reqs.get_mut(req).expect("a live request");
        debug_assert!(computed_tokens <= st.allocated, "computed tokens without slots");
        st.computed = st.computed.max(computed_tokens);
        if computed_tokens == st.prefill_end {
            self.pending = Some(req);
        }
    }

    fn slide_window(&mut self, req: ReqId, kv_tokens: usize, decode: bool) {
        self.settle_pending();
        let (window, sharing) = (self.window, self.sharing);
        let st = self.reqs.get_mut(req).expect("a live request");
        // `maybe_evict_swa`: at a decode step but a request's first, once 128 tokens slid out;
        // at a prefill chunk only with the radix cache off, whatever slid out.
        let due = if decode {
            st.decodes += 1;
            st.decodes > 1 && kv_tokens >= window + st.evicted + EVICTION_INTERVAL
        } else {
            !sharing
        };
        if due {
            let mut st = self.reqs.take(req);
            self.free_window(&mut st, kv_tokens, 1);
            self.reqs.put(req, st);
        }
    }

    fn finish(&mut self, req: ReqId) {
        if self.pending == Some(req) {
            self.pending = None;
        } else {
            self.settle_pending();
        }
        let mut st = self.reqs.take(req);
        let computed = st.computed;
        self.insert(&mut st, computed, true);
        self.release(st);
    }

    fn preempt(&mut self, req: ReqId) {
        self.settle_pending();
        let st = self.reqs.take(req);
        self.release(st);
    }

    fn checkpoint(&mut self, req: ReqId) {
        self.settle_pending();
        let Some(mut st) = self.reqs.remove(req) else { return };
        // A chunk left out of the last batch (`add_chunked_req` found no room) inserts nothing.
        if st.computed <= st.prefill_end && st.computed != st.inserted_at {
            let computed = st.computed;
            self.insert(&mut st, computed, false);
        }
        self.reqs.put(req, st);
    }

    fn settle(&mut self) {
        self.settle_pending();
    }

    fn touch(&mut self, seq: SeqId, known: usize) -> (usize, u64) {
        let t = self.touch_tiers(seq, known);
        (t.hit, t.pinned)
    }

    fn touch_tiers(&mut self, seq: SeqId, known: usize) -> Touched {
        self.settle_pending();
        let f = self.tree.match_swa(&self.store, seq, known.saturating_sub(1));
        Touched {
            hit: f.hit,
            pinned: self.tree.unlocked_above(f.node),
            host: 0,
            window_pinned: self.tree.swa_unlocked_above(f.node),
        }
    }

    fn touch_prefix(&mut self, seq: SeqId, len: usize) -> usize {
        self.settle_pending();
        self.tree.match_swa(&self.store, seq, len).hit
    }

    fn ensure_free(&mut self, tokens: u64) -> bool {
        self.settle_pending();
        self.make_room(tokens)
    }

    fn usage(&self) -> Usage {
        Usage {
            used_tokens: self.full.used,
            evictable_tokens: self.tree.evictable_tokens(),
            capacity_tokens: self.full.capacity,
        }
    }

    fn window_usage(&self) -> Option<Usage> {
        Some(Usage {
            used_tokens: self.swa_used(),
            evictable_tokens: self.tree.swa_evictable(),
            capacity_tokens: Some(self.swa_capacity),
        })
    }

    fn stats(&self) -> CacheStats {
        CacheStats { evicted_tokens: self.evicted, peak_used_tokens: self.full.peak, partial_block_waste_tokens: 0 }
    }

    fn check_invariants(&self) {
        self.tree.check_invariants();
        let private: u64 = self.reqs.live().map(|s| self.private_of(s)).sum();
        assert_eq!(private, self.private, "private slot count");
        assert_eq!(self.full.used, self.private + self.tree.size(), "slots not conserved");
        let swa: u64 = self.reqs.live().map(|s| self.swa_private_of(s)).sum();
        assert_eq!(swa, self.swa_private, "private window slot count");
        assert!(self.swa_used() <= self.swa_capacity, "window pool overdrawn");
        if self.reqs.live().next().is_none() {
            assert_eq!(self.tree.protected_tokens(), 0, "idle cache with locked nodes");
        }
        for st in self.reqs.live() {
            assert!(st.cached <= st.allocated && st.node != ROOT || st.cached == 0, "request state");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::conformance::{admit_or_apply, op_strategy, seqs_strategy, Live};
    use super::*;
    use proptest::prelude::*;

    /// (full free, window free | full evictable, full protected | window evictable, protected).
    fn counters(c: &SwaCache) -> (u64, u64, u64, u64, u64, u64) {
        c.check_invariants();
        let t = &c.tree;
        let w = t.swa_size() - t.swa_evictable();
        (c.full.available(), c.swa_available(), t.evictable_tokens(), t.protected_tokens(), t.swa_evictable(), w)
    }

    /// A window of 4 tokens, page 1, 64 full and 32 window slots: a request whose prefill
    /// leaves its oldest window KV freed, a second sharing 6 of its tokens that misses (the
    /// path crosses a tombstone) and repairs the path for a third, then both evictions.
    /// Counters worked by hand from SGLang 0.5.23's `SWAComponent` and allocator, and checked
    /// against the real classes on CPU.
    #[test]
    fn a_sharer_repairs_the_window_for_the_next() {
        let a: Vec<u32> = (0..13).collect();
        let b: Vec<u32> = (0..6).chain(100..104).collect();
        let d: Vec<u32> = (0..6).chain(200..204).collect();
        let store = Arc::new(TokenStore::from_seqs(&[a, b, d]));
        let mut c = SwaCache::new(store, 1, 64, SwaLayout { window: 4, tokens: 32, sharing: true });
        // A: a 10-token prompt, then three decode steps.
        assert_eq!(c.admit(0, 0, 10, 0).expect("fits").hit_tokens, 0);
        assert!(c.grow(0, 10));
        assert_eq!(counters(&c), (54, 22, 0, 0, 0, 0));
        c.computed(0, 10);
        c.settle();
        // [0, 5) freed before the insert: a tombstone; [5, 6) and the capped leaf [6, 10) live.
        assert_eq!(counters(&c), (54, 27, 0, 10, 1, 4));
        for k in 10..13 {
            c.slide_window(0, k, true);
            assert!(c.grow(0, k + 1));
            c.computed(0, k + 1);
        }
        assert_eq!(counters(&c), (51, 24, 0, 10, 1, 4));
        c.finish(0);
        assert_eq!(counters(&c), (51, 24, 13, 0, 8, 0));
        // B: the full match reaches 6 tokens, the window run only 1 past the tombstone.
        assert_eq!(c.peek(1, 10), 0);
        assert_eq!(c.admit(1, 1, 10, 0).expect("fits").hit_tokens, 0);
        assert!(c.grow(1, 10));
        c.computed(1, 10);
        c.settle();
        // Its insert stops at the branch (6) and revives [1, 5) from its own KV.
        assert_eq!(counters(&c), (47, 16, 7, 6, 7, 5));
        assert_eq!(c.peek(2, 10), 6, "the next sharer hits");
        c.finish(1);
        assert_eq!(counters(&c), (47, 16, 17, 0, 16, 0));
        // The window walk's least recent node is A's [6, 10), inside the path: a tombstone.
        assert_eq!(c.tree.swa_evict(3), (0, 4));
        assert_eq!(counters(&c), (47, 20, 17, 0, 12, 0));
        // The least recent full leaf, A's outputs, goes whole.
        let freed = c.tree.evict(2);
        c.full.put(freed);
        assert_eq!(counters(&c), (50, 23, 14, 0, 9, 0));
        assert_eq!(c.peek(2, 10), 6);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// Random lifecycles with decode frees, checkpoints and evictions towards random room:
        /// both pools stay within their sizes, the counters and the window list stay
        /// consistent, and an idle cache holds nothing locked in either pool.
        #[test]
        fn random_operations_keep_both_pools_consistent(
            seqs in seqs_strategy(),
            ops in prop::collection::vec((op_strategy(), 0u8..4), 1..80),
            full in 16u64..160,
            ratio in 0.3f64..1.0,
            window in 1u32..12,
            page in prop::sample::select(vec![1u32, 4]),
            sharing in prop::bool::ANY,
        ) {
            let st = Arc::new(TokenStore::from_seqs(&seqs));
            let tokens = ((full as f64 * ratio) as u64).max(window as u64 + page as u64 + 1);
            let mut c = SwaCache::new(st.clone(), page, full, SwaLayout { window, tokens, sharing });
            let mut live: Vec<Option<Live>> = vec![None; 6];
            for (op, extra) in &ops {
                admit_or_apply(&mut c, op, &mut live, &st, page as usize)?;
                match extra {
                    1 => {
                        for (req, l) in live.iter().enumerate() {
                            if let Some(l) = l {
                                c.slide_window(req as ReqId, l.allocated, true);
                            }
                        }
                    }
                    2 => {
                        if let Some(req) = live.iter().position(Option::is_some) {
                            c.checkpoint(req as ReqId);
                        }
                    }
                    3 => {
                        c.ensure_free(full / 2);
                    }
                    _ => c.settle(),
                }
                let (u, w) = (c.usage(), c.window_usage().expect("a window pool"));
                prop_assert!(u.used_tokens <= full && w.used_tokens <= tokens);
                c.check_invariants();
            }
            for (req, l) in live.iter().enumerate() {
                if l.is_some() {
                    c.finish(req as ReqId);
                }
            }
            c.check_invariants();
            let (u, w) = (c.usage(), c.window_usage().expect("a window pool"));
            prop_assert_eq!(u.used_tokens, u.evictable_tokens, "idle cache holds pinned full KV");
            prop_assert_eq!(w.used_tokens, w.evictable_tokens, "idle cache holds pinned window KV");
            // Everything unlocked goes when asked.
            let both = c.swa_capacity.min(c.full.capacity.expect("bounded"));
            prop_assert!(c.ensure_free(both));
            c.check_invariants();
        }
    }
}
