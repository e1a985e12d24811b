//! Token-pool caches built on the radix tree: SGLang RadixAttention (ENGINE_SPEC §3.1–3.3)
//! and LightLLM TokenAttention with its prompt cache (§4.1, §4.4) differ only in a few rules,
//! gathered in [`Rules`]: page size, when a request's KV enters the tree, how much eviction
//! asks for, and what preemption keeps. Slots a request holds but the tree does not are its
//! private slots; slots whose content the tree already had are freed as duplicates on insert.

use super::hicache::{HostTier, HostTierConfig, HostTierStats};
use super::storage::{StorageConfig, StorageTier};
use super::tree::{NodeId, RadixTree, ROOT};
use super::{
    Admitted, CacheSpec, CacheStats, Policy, PrefixCache, ReqId, ReqSlots, SglangCacheRules, SlotPool, Touched, Usage,
};
use crate::workload::{SeqId, TokenStore};
use std::sync::Arc;

/// The engine-specific rules of a tree cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    pub policy: Policy,
    /// Match/insert granularity in tokens (SGLang `--page-size`; LightLLM 1).
    pub page_size: usize,
    /// SGLang: the computed prompt (each chunk) is inserted when its prefill step ends.
    /// LightLLM: nothing enters the tree before the request finishes or is paused.
    pub insert_after_prefill: bool,
    /// SGLang `evict_from_tree_cache(n)` asks the tree for all `n` tokens when fewer than `n`
    /// are free; LightLLM asks for the deficit `n − free` only.
    pub evict_deficit_only: bool,
    /// LightLLM inserts a paused request's computed tokens before freeing them; SGLang's
    /// retraction frees everything not already in the tree.
    pub insert_on_preempt: bool,
    /// SGLang: an insert that adds nothing (the page-aligned key ends where the request's
    /// cached prefix does) still walks its key, so the path's access time is refreshed.
    /// SGLang's `RadixCache.insert` always walks (`_insert_helper` stamps every node it
    /// visits), and its callers always insert: `checkpoint` at each chunk and at a request's
    /// finish (`release_kv_cache`, `mem_cache/radix_cache.py` and `mem_cache/common.py`,
    /// 0.5.23), `cache_finished_req` / `cache_unfinished_req` in 0.4.10. With pages above one
    /// token a request that finishes before it fills the page its prompt ends in makes such an
    /// insert: its path counts as used at its finish, not at its prefill. With page size 1
    /// only a request finishing in its prefill step does, repeating the walk just made.
    /// LightLLM keeps the early return (its code not checked for this).
    pub walk_unchanged: bool,
}

#[derive(Clone, Copy)]
struct ReqState {
    seq: SeqId,
    /// Locked node ending the request's cached prefix.
    node: NodeId,
    /// Tokens of the request covered by the tree (its locked path).
    cached: usize,
    /// Tokens the request holds slots for (cached ones included); with pages above one token
    /// its slots are whole pages, [`TreeCache::slots_for`].
    allocated: usize,
    computed: usize,
    /// Known tokens at admission: the (re-)prefill ends there.
    prefill_end: usize,
    /// Tokens the request has inserted into the tree since its admission (SGLang
    /// `cache_inserted_len`): a host tier counts an insert's pass only past them.
    inserted: usize,
}

/// A token-granular KV pool with a radix prefix cache.
pub struct TreeCache {
    store: Arc<TokenStore>,
    rules: Rules,
    tree: RadixTree,
    pool: SlotPool,
    /// Slots held by requests and not by the tree.
    private: u64,
    reqs: ReqSlots<ReqState>,
    /// Each request's known tokens at its first admission (its prompt), 0 before.
    prompt_len: Vec<u32>,
    /// SGLang 0.5 `RadixCache.checkpoint`: each insert also splits the path at the end of the
    /// request's prompt (page-aligned), so eviction takes the outputs before the prompt.
    split_prompt: bool,
    /// SGLang's scheduler publishes an unfinished prefill chunk when it next schedules
    /// (`stash_chunked_request` → [`PrefixCache::checkpoint`]), not when the chunk's step ends.
    checkpoint_chunks: bool,
    evicted: u64,
    /// SGLang's HiCache host tier ([`crate::cache::hicache`]); `None`: one tier.
    host: Option<Box<HostTier>>,
    /// HiCache's storage tier under the host tier ([`crate::cache::storage`]).
    storage: Option<Box<StorageTier>>,
}

impl TreeCache {
    /// SGLang RadixAttention with `page_size` tokens per page, by the newest release's rules
    /// (a run with SGLang's scheduler sets its bundle's through [`PrefixCache::follow`]).
    pub fn sglang(store: Arc<TokenStore>, page_size: u32, capacity_tokens: Option<u64>) -> Self {
        let rules = Rules {
            policy: Policy::Radix,
            page_size: page_size as usize,
            insert_after_prefill: true,
            evict_deficit_only: true,
            insert_on_preempt: false,
            walk_unchanged: true,
        };
        // SGLang rounds the pool down to whole pages.
        let mut c = Self::new(store, rules, capacity_tokens.map(|c| c - c % page_size as u64));
        c.split_prompt = true;
        c
    }

    /// A tree cache with explicit rules.
    pub fn new(store: Arc<TokenStore>, rules: Rules, capacity_tokens: Option<u64>) -> Self {
        Self {
            store,
            rules,
            tree: RadixTree::new(rules.page_size),
            pool: SlotPool::new(capacity_tokens),
            private: 0,
            reqs: ReqSlots::default(),
            prompt_len: Vec::new(),
            split_prompt: false,
            checkpoint_chunks: false,
            evicted: 0,
            host: None,
            storage: None,
        }
    }

    /// The tree (for tests and analysis).
    pub fn tree(&self) -> &RadixTree {
        &self.tree
    }

    /// Slots a request's first `tokens` tokens hold: whole pages (SGLang
    /// `PagedTokenToKVPoolAllocator.alloc_extend` / `alloc_decode`, `mem_cache/allocator/paged.py`,
    /// 0.5.23 and 0.4.10, hand a request whole pages, so the unused tail of its last page is
    /// not free).
    fn slots_for(&self, tokens: usize) -> u64 {
        tokens.div_ceil(self.rules.page_size) as u64 * self.rules.page_size as u64
    }

    /// Slots a request holds that the tree does not: its pages past the cached (page-aligned)
    /// prefix.
    fn private_of(&self, st: &ReqState) -> u64 {
        self.slots_for(st.allocated) - st.cached as u64
    }

    /// Frees room for `n` new slots the engine's way; false when even a full eviction of
    /// unlocked entries would not make room.
    fn make_room(&mut self, n: u64) -> bool {
        let free = self.pool.available();
        if n <= free {
            return true;
        }
        if n - free > self.tree.evictable_tokens() {
            return false;
        }
        self.evict_towards(n)
    }

    /// Evicts towards `n` free slots (the shortfall, or all `n` by the rules); whether they are.
    fn evict_towards(&mut self, n: u64) -> bool {
        let free = self.pool.available();
        if n <= free {
            return true;
        }
        let ask = if self.rules.evict_deficit_only { n - free } else { n };
        let freed = match self.host.as_mut() {
            Some(h) => h.evict(&mut self.tree, ask),
            None => self.tree.evict(ask),
        };
        self.evicted += freed;
        self.pool.put(freed);
        self.pool.available() >= n
    }

    fn alloc(&mut self, n: u64) -> bool {
        if !self.make_room(n) {
            return false;
        }
        self.pool.take(n);
        self.private += n;
        true
    }

    /// Inserts the request's first `len` tokens (page-aligned), frees its duplicate slots and
    /// moves its lock to the new end node (SGLang `cache_unfinished_req`, `checkpoint`).
    fn insert(&mut self, st: &mut ReqState, req: ReqId, len: usize) {
        let len = self.tree.align(len);
        if len < st.cached || len == st.cached && !self.rules.walk_unchanged {
            return;
        }
        let (present, node) = self.tree.insert(&self.store, st.seq, len);
        if let Some(h) = self.host.as_mut() {
            h.inserted(&mut self.tree, node, st.inserted);
            st.inserted = st.inserted.max(len);
        }
        let prompt = self.tree.align(self.prompt_len.get(req as usize).map_or(0, |&p| p as usize));
        if self.split_prompt && 0 < prompt && prompt < len {
            // The prompt's end becomes a node boundary. A split keeps the lower part's id, so
            // `node` still ends the key; `checkpoint`'s second match only refreshes this path,
            // the most recent anyway.
            self.tree.insert(&self.store, st.seq, prompt);
        }
        debug_assert!(present >= st.cached, "the tree lost part of a locked prefix");
        // [cached, present) were already in the tree: the request's copies are duplicates.
        let dup = (present - st.cached) as u64;
        self.pool.put(dup);
        self.private -= (len - st.cached) as u64;
        self.tree.lock(node);
        self.tree.unlock(st.node);
        st.node = node;
        st.cached = len;
    }

    /// Frees the request's private slots and unlocks its path.
    fn release(&mut self, st: ReqState) {
        let private = self.private_of(&st);
        self.pool.put(private);
        self.private -= private;
        self.tree.unlock(st.node);
    }
}

impl TreeCache {
    /// SGLang's scheduler drives this cache: follow that release's eviction and prompt split,
    /// and publish an unfinished prefill chunk only at [`PrefixCache::checkpoint`]. LightLLM's
    /// token cache has no such rules and ignores it.
    pub fn follow_sglang(&mut self, rules: SglangCacheRules) {
        if self.rules.policy == Policy::Radix {
            self.rules.evict_deficit_only = rules.evict_shortfall;
            self.split_prompt = rules.split_prompt;
            self.checkpoint_chunks = true;
        }
    }
}

impl PrefixCache for TreeCache {
    fn spec(&self) -> CacheSpec {
        CacheSpec {
            policy: self.rules.policy,
            block_size: None,
            page_size: (self.rules.policy == Policy::Radix).then_some(self.rules.page_size as u32),
            capacity_tokens: self.pool.capacity,

            hybrid: None,
            sglang_pool: None,
        }
    }

    fn peek(&self, seq: SeqId, known: usize) -> usize {
        self.tree.peek(&self.store, seq, known.saturating_sub(1))
    }

    fn admit_reserving(
        &mut self,
        req: ReqId,
        seq: SeqId,
        known: usize,
        max_new_tokens: usize,
        reserve_tokens: usize,
    ) -> Option<Admitted> {
        debug_assert!(!self.reqs.is_live(req), "request admitted twice");
        // At least the last known token is recomputed; the match is page-aligned.
        let found = self.tree.match_tiers(&self.store, seq, known.saturating_sub(1));
        let (mut hit, mut node) = (found.device, found.node);
        self.tree.lock(node);
        if self.host.is_some() {
            // A host run long enough is loaded back (the prefill waits for it in its step),
            // device leaves evicted for the room it lacks, the engine's way.
            if HostTier::loadable(&found) {
                self.tree.pin_host(found.host_node);
                self.evict_towards(found.host as u64);
                self.tree.unpin_host(found.host_node);
            }
            let h = self.host.as_mut().expect("checked");
            let loaded = h.load(&mut self.tree, &mut self.pool, &found);
            if loaded > 0 {
                self.tree.lock(found.host_node);
                self.tree.unlock(node);
                (hit, node) = (hit + loaded, found.host_node);
            }
        }
        let new = (known - hit).min(max_new_tokens);
        debug_assert!(hit.is_multiple_of(self.rules.page_size), "a hit is whole pages");
        // The reservation counts what is free or evictable once the hit is locked (a hit that
        // was evictable is taken, as vLLM counts it).
        let reserve = reserve_tokens.saturating_sub(hit) as u64;
        if reserve > new as u64 && reserve > self.pool.available().saturating_add(self.tree.evictable_tokens())
            || !self.alloc(self.slots_for(hit + new) - hit as u64)
        {
            self.tree.unlock(node);
            return None;
        }
        let st =
            ReqState { seq, node, cached: hit, allocated: hit + new, computed: hit, prefill_end: known, inserted: 0 };
        self.reqs.put(req, st);
        let i = req as usize;
        if self.prompt_len.len() <= i {
            self.prompt_len.resize(i + 1, 0);
        }
        if self.prompt_len[i] == 0 {
            self.prompt_len[i] = known as u32;
        }
        Some(Admitted { hit_tokens: hit, allocated_tokens: hit + new })
    }

    // The state is copied out and written back in place (not taken out and put back, which
    // moves the live states around): these run for every scheduled request each step.
    fn grow(&mut self, req: ReqId, total_tokens: usize) -> bool {
        let allocated = self.reqs.get(req).expect("request admitted").allocated;
        let ok = total_tokens <= allocated || self.alloc(self.slots_for(total_tokens) - self.slots_for(allocated));
        if ok {
            self.reqs.get_mut(req).expect("request admitted").allocated = allocated.max(total_tokens);
        }
        ok
    }

    fn computed(&mut self, req: ReqId, computed_tokens: usize) {
        let mut st = *self.reqs.get(req).expect("request admitted");
        debug_assert!(computed_tokens <= st.allocated, "computed tokens without slots");
        st.computed = st.computed.max(computed_tokens);
        let chunk = computed_tokens < st.prefill_end;
        if self.rules.insert_after_prefill && computed_tokens <= st.prefill_end && !(chunk && self.checkpoint_chunks) {
            self.insert(&mut st, req, computed_tokens);
        }
        *self.reqs.get_mut(req).expect("request admitted") = st;
    }

    fn finish(&mut self, req: ReqId) {
        let mut st = self.reqs.take(req);
        // Everything computed (prompt + output − 1) enters the tree; the unaligned tail is freed.
        let computed = st.computed;
        self.insert(&mut st, req, computed);
        self.release(st);
    }

    fn preempt(&mut self, req: ReqId) {
        let mut st = self.reqs.take(req);
        if self.rules.insert_on_preempt {
            let computed = st.computed;
            self.insert(&mut st, req, computed);
        }
        self.release(st);
    }

    fn follow(&mut self, rules: &super::CacheRules) {
        if let Some(sglang) = rules.sglang {
            self.follow_sglang(sglang);
        }
    }

    fn checkpoint(&mut self, req: ReqId) {
        let Some(mut st) = self.reqs.remove(req) else { return };
        let computed = st.computed;
        if computed <= st.prefill_end {
            self.insert(&mut st, req, computed);
        }
        self.reqs.put(req, st);
    }

    fn touch(&mut self, seq: SeqId, known: usize) -> (usize, u64) {
        let (hit, node) = self.tree.match_prefix(&self.store, seq, known.saturating_sub(1));
        (hit, self.tree.unlocked_above(node))
    }

    fn touch_tiers(&mut self, seq: SeqId, known: usize) -> Touched {
        let f = self.tree.match_tiers(&self.store, seq, known.saturating_sub(1));
        Touched { hit: f.device, pinned: self.tree.unlocked_above(f.node), host: f.host, window_pinned: 0 }
    }

    fn attach_host_tier(&mut self, cfg: HostTierConfig) -> bool {
        if self.rules.policy != Policy::Radix {
            return false;
        }
        self.host = Some(Box::new(HostTier::new(cfg, &mut self.tree)));
        true
    }

    fn host_events(&mut self, now: f64) {
        if let Some(h) = self.host.as_mut() {
            h.events(&mut self.tree, now);
            if let Some(st) = self.storage.as_mut() {
                st.drain(&self.store, &mut self.tree, h, now);
            }
        }
    }

    fn attach_storage(&mut self, cfg: StorageConfig) -> bool {
        let Some(h) = self.host.as_mut() else { return false };
        h.collect_acked();
        let st = StorageTier::new(cfg, self.rules.page_size, h.cfg.policy, h.cfg.host_tokens);
        self.storage = Some(Box::new(st));
        true
    }

    fn has_storage(&self) -> bool {
        self.storage.is_some()
    }

    fn storage_begin_pass(&mut self, now: f64) {
        if let (Some(st), Some(h)) = (self.storage.as_mut(), self.host.as_mut()) {
            st.begin_pass(&self.store, &mut self.tree, h, now);
        }
    }

    fn storage_lookup(&mut self, req: ReqId, seq: SeqId, known: usize, now: f64, hit_end: Option<usize>) {
        if let Some(st) = self.storage.as_mut() {
            st.lookup(&self.store, &mut self.tree, req, seq, known, now, hit_end);
        }
    }

    fn storage_ready(&mut self, req: ReqId, now: f64) -> bool {
        match (self.storage.as_mut(), self.host.as_mut()) {
            (Some(st), Some(h)) => st.ready(&self.store, &mut self.tree, h, req, now),
            _ => true,
        }
    }

    fn storage_due_retries(&mut self, waiting: &[ReqId], out: &mut Vec<(ReqId, Option<usize>)>) {
        if let Some(st) = self.storage.as_mut() {
            st.due_retries(waiting, out);
        }
    }

    fn storage_hit_lost(&mut self, req: ReqId, matched: usize) -> bool {
        self.storage.as_mut().is_some_and(|st| st.hit_lost(req, matched))
    }

    fn storage_admitted(&mut self, req: ReqId) {
        if let Some(st) = self.storage.as_mut() {
            st.admitted(req);
        }
    }

    fn storage_swap(&mut self, store: &mut super::storage::Store) -> bool {
        self.storage.as_mut().map(|st| st.swap_store(store)).is_some()
    }

    fn storage_dropped(&mut self, req: ReqId) {
        if let Some(st) = self.storage.as_mut() {
            st.dropped(&mut self.tree, req);
        }
    }

    fn storage_requeued(&mut self, req: ReqId) {
        if let Some(st) = self.storage.as_mut() {
            st.requeued(req);
        }
    }

    fn take_host_copies(&mut self) -> (f64, f64) {
        self.host.as_mut().map_or((0.0, 0.0), |h| h.take_step())
    }

    fn next_copy_end(&self) -> Option<f64> {
        let host = self.host.as_ref().and_then(|h| h.next_copy_end());
        let storage = self.storage.as_ref().and_then(|st| st.next_event());
        match (host, storage) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn host_tokens(&self) -> Option<u64> {
        self.host.as_ref().map(|h| h.host_used(&self.tree))
    }

    fn host_tier_stats(&self) -> Option<HostTierStats> {
        let mut s = self.host.as_ref()?.stats();
        s.storage = self.storage.as_ref().map(|st| st.stats());
        Some(s)
    }

    fn touch_prefix(&mut self, seq: SeqId, len: usize) -> usize {
        self.tree.match_prefix(&self.store, seq, len).0
    }

    fn touch_prefix_tiers(&mut self, seq: SeqId, len: usize) -> (usize, usize) {
        let f = self.tree.match_tiers(&self.store, seq, len);
        (f.device, f.host)
    }

    fn ensure_free(&mut self, tokens: u64) -> bool {
        self.evict_towards(tokens)
    }

    fn usage(&self) -> Usage {
        Usage {
            used_tokens: self.pool.used,
            evictable_tokens: self.tree.evictable_tokens(),
            capacity_tokens: self.pool.capacity,
        }
    }

    fn stats(&self) -> CacheStats {
        CacheStats { evicted_tokens: self.evicted, peak_used_tokens: self.pool.peak, partial_block_waste_tokens: 0 }
    }

    fn check_invariants(&self) {
        self.tree.check_invariants();
        let private: u64 = self.reqs.live().map(|s| self.private_of(s)).sum();
        assert_eq!(private, self.private, "private slot count");
        assert_eq!(self.pool.used, self.private + self.tree.size(), "slots not conserved");
        // A host tier's copies in flight lock what they copy until acknowledged.
        if self.reqs.live().next().is_none() && !self.host.as_ref().is_some_and(|h| h.copying()) {
            assert_eq!(self.tree.protected_tokens(), 0, "idle cache with locked nodes");
        }
        for st in self.reqs.live() {
            assert!(st.cached <= st.allocated && st.node != ROOT || st.cached == 0, "request state");
        }
    }
}
