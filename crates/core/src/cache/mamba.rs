//! SGLang's radix cache for a model whose layers mix full attention with linear-attention or
//! Mamba layers (0.5.23: a `UnifiedRadixCache` of FULL and MAMBA components over a
//! `HybridLinearKVPool` and a `HybridReqToTokenPool`, `mem_cache/unified_radix_cache.py`,
//! `mem_cache/unified_cache/components/mamba.py`): the full-attention layers' KV in a token pool
//! as for a dense model, and the linear layers' recurrent state — one fixed-size slot per
//! sequence — in a pool of `max_mamba_cache_size` slots (`MambaSlotAllocator`,
//! `mem_cache/allocator/mamba.py`). A tree node may hold a state: the one after its whole path,
//! so a hit ends on the deepest matched node holding one ([`super::tree::mamba`]).
//!
//! A request's slots: a hit's state is copied into a slot of its own when it is matched
//! (`MambaComponent.finalize_match_result_in_cache`, a state evicted when none is free); one
//! without a hit gets its slot with its batch (`alloc_req_slots` → `ensure_mamba_capacity`),
//! and under `extra_buffer` its ping-pong track slots too. Its inserts (`checkpoint_into_tree` →
//! `prepare_for_caching_req`, `cleanup_after_caching_req`): under `no_buffer`, at each prefill
//! chunk's end and its prompt's a copy of its state in a fresh slot (a state evicted when none
//! is free), at its finish its own slot; under `extra_buffer`, only up to the last point its
//! state was tracked at, donating the tracking slot — a chunk of at least the checkpoint grid
//! `G` tracks its prefix plus the grid's floor of its length (or the match's branching point),
//! a decode step whose sequence reaches a multiple of the track grid `T` tracks there, and a
//! request that tracked nothing inserts nothing. An insert ending on a node that holds a state
//! frees the one it brought. The locked node moves to each insert's end; a retracted request
//! inserts nothing and frees its slots. KV is counted as in the dense radix cache: a request's
//! slots past its locked prefix are its own.

use super::tree::{NodeId, RadixTree, ROOT};
use super::{
    Admitted, CacheSpec, CacheStats, Policy, PrefixCache, ReqId, ReqSlots, SglangPool, SlotPool, Touched, Usage,
};
use crate::workload::{SeqId, TokenStore};
use std::sync::Arc;

/// How the tree gets a running request's states (`--mamba-radix-cache-strategy`, 0.5.23
/// `arg_groups/fields/exec_.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// The state at each insert's end: a copy of the request's own for an unfinished request,
    /// the request's own slot at its finish (page size 1 only).
    NoBuffer,
    /// States tracked at grid points into ping-pong slots the request holds beside its working
    /// slot, donated to the tree at its inserts.
    ExtraBuffer,
}

impl Strategy {
    /// The name SGLang's flag takes.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::NoBuffer => "no_buffer",
            Strategy::ExtraBuffer => "extra_buffer",
        }
    }
}

/// The state pool of a model with linear-attention layers under SGLang.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct MambaLayout {
    /// Slots of the pool (`max_mamba_cache_size`; its padding slot apart).
    pub slots: u64,
    pub strategy: Strategy,
    /// `extra_buffer`: ping-pong track slots each running request holds (1; 2 under the
    /// overlap scheduler, `allocation_sizing.get_mamba_tracking_slots`).
    pub track_slots: u32,
    /// `mamba_cache_chunk_size` `C`: the model's state chunk or the page, whichever is larger.
    pub cache_chunk: u32,
    /// The model's own state chunk (Qwen3-Next's FLA chunk, 64): a tracked point off it is read
    /// from the kernel's intermediate states, which moves where a branching point may land.
    pub state_chunk: u32,
    /// `--mamba-track-interval`: decode tracks at multiples of `lcm(G, interval)`.
    pub track_interval: u32,
}

#[derive(Clone, Copy)]
struct Req {
    seq: SeqId,
    /// Locked node ending the request's cached prefix (its full path and its state).
    node: NodeId,
    /// Tokens covered by the tree (`cache_protected_len`).
    cached: usize,
    /// Tokens it holds KV slots for (whole pages).
    allocated: usize,
    computed: usize,
    /// Known tokens at admission: the (re-)prefill ends there.
    prefill_end: usize,
    /// Computed tokens at its last insert (a chunk inserts once).
    inserted_at: usize,
    /// Holds its working state slot (`mamba_pool_idx`).
    working: bool,
    /// Ping-pong track slots it holds.
    tracks: u32,
    /// `mamba_branching_seqlen`: the grid's floor of its match's full KV, past its hit.
    branch: Option<usize>,
    /// `mamba_last_track_seqlen`: where its state was last tracked.
    last_track: Option<usize>,
}

/// SGLang's radix cache with the recurrent-state component.
pub struct MambaCache {
    store: Arc<TokenStore>,
    page: usize,
    layout: MambaLayout,
    /// `mamba_checkpoint_grid` `G = lcm(C, page)` and `mamba_track_grid` `T = lcm(G, interval)`.
    grid: usize,
    track_grid: usize,
    tree: RadixTree,
    full: SlotPool,
    /// Full slots held by requests and not by the tree.
    private: u64,
    /// State slots held by requests, and by matches not yet admitted.
    held: u64,
    /// Slots matches took for a hit's copy that no admission has claimed yet.
    cow: u64,
    reqs: ReqSlots<Req>,
    /// A request whose prefill just ended: its insert waits to learn whether it finished in
    /// that step (`release_kv_cache`) or runs on (`checkpoint`).
    pending: Option<ReqId>,
    evicted: u64,
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: usize, b: usize) -> usize {
    a / gcd(a, b) * b
}

impl MambaCache {
    /// A cache of `full_tokens` full slots (whole pages) and `layout.slots` state slots.
    pub fn new(store: Arc<TokenStore>, page_size: u32, full_tokens: u64, layout: MambaLayout) -> Self {
        let page = page_size as usize;
        let mut tree = RadixTree::new(page);
        tree.enable_mamba();
        let grid = lcm((layout.cache_chunk as usize).max(1), page);
        Self {
            store,
            page,
            layout,
            grid,
            track_grid: lcm(grid, (layout.track_interval as usize).max(1)),
            tree,
            full: SlotPool::new(Some(full_tokens - full_tokens % page as u64)),
            private: 0,
            held: 0,
            cow: 0,
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

    fn extra(&self) -> bool {
        self.layout.strategy == Strategy::ExtraBuffer
    }

    /// Free state slots.
    fn free_slots(&self) -> u64 {
        self.layout.slots - self.tree.states() - self.held
    }

    /// State slots the request lacks: its working slot, and under `extra_buffer` its ping-pong
    /// slots (`ensure_mamba_capacity`'s count).
    fn missing(&self, st: &Req) -> u64 {
        let tracks = if self.extra() && st.tracks == 0 { self.layout.track_slots } else { 0 };
        u64::from(!st.working) + u64::from(tracks)
    }

    /// `evict_for_alloc(EvictParams(num_tokens=0, mamba_num=k))`.
    fn evict_states(&mut self, k: u64) {
        let (full, _) = self.tree.evict_states(k);
        self.full.put(full);
        self.evicted += full;
    }

    /// One slot (`mamba_allocator.alloc(1)`), a state evicted first when none is free, with
    /// `protect` locked meanwhile (the match's end, at a copy-on-write; `ROOT`: nothing).
    fn take_slot(&mut self, protect: NodeId) -> bool {
        if self.free_slots() == 0 {
            self.tree.lock(protect);
            self.tree.state_lock(protect);
            self.evict_states(1);
            self.tree.unlock(protect);
            self.tree.state_unlock(protect);
        }
        if self.free_slots() == 0 {
            return false;
        }
        self.held += 1;
        true
    }

    /// Claims a slot a match took for a hit's copy, if there is one.
    fn claim_cow(&mut self) -> bool {
        let claimed = self.cow > 0;
        self.cow -= u64::from(claimed);
        claimed
    }

    /// Gives the request the slots it lacks if they are free (`HybridReqToTokenPool.alloc`).
    fn grant(&mut self, st: &mut Req) -> bool {
        let need = self.missing(st);
        if need > self.free_slots() {
            return false;
        }
        self.held += need;
        st.working = true;
        if self.extra() {
            st.tracks = st.tracks.max(self.layout.track_slots);
        }
        true
    }

    /// `evict_to_free_tokens(n)`: full leaves (with their states) for the shortfall; whether
    /// `n` full slots are free.
    fn make_room(&mut self, n: u64) -> bool {
        let free = self.full.available();
        if free < n {
            let freed = self.tree.evict(n - free);
            self.full.put(freed);
            self.evicted += freed;
        }
        self.full.available() >= n
    }

    fn alloc(&mut self, n: u64) -> bool {
        if !self.make_room(n) {
            return false;
        }
        self.full.take(n);
        self.private += n;
        true
    }

    /// Inserts the request's first `len` tokens with one state slot it holds (or took for the
    /// insert) at their end — kept by the tree, or freed when the end node holds one already —
    /// frees its KV the tree already had, and moves its locks to the new end
    /// (`checkpoint_into_tree`).
    fn publish(&mut self, st: &mut Req, len: usize) {
        let len = self.floor(len);
        debug_assert!(len >= st.cached, "an insert inside the locked prefix");
        let (present, node, _existed) = self.tree.insert_mamba(&self.store, st.seq, len);
        debug_assert!(present >= st.cached, "the tree lost part of a locked prefix");
        self.held -= 1;
        self.full.put((present - st.cached) as u64);
        self.private -= (len - st.cached) as u64;
        self.tree.unlock(st.node);
        self.tree.state_unlock(st.node);
        self.tree.lock(node);
        self.tree.state_lock(node);
        st.node = node;
        st.cached = len;
    }

    /// The insert of a request that runs on (`checkpoint(up_to = extend_end)`): under
    /// `no_buffer` its computed tokens with a copy of its state in a fresh slot; under
    /// `extra_buffer` up to its last tracked point, donating the tracking slot for a fresh one,
    /// or nothing when it tracked none since its last insert.
    fn checkpoint_insert(&mut self, st: &mut Req) {
        st.inserted_at = st.computed;
        let up_to = if self.extra() { st.last_track.take() } else { Some(st.computed) };
        let Some(len) = up_to.filter(|&l| l > 0 && self.floor(l) >= st.cached) else { return };
        // `_alloc_mamba_slot`: the copy, or the ping-pong slot replacing the donated one.
        if self.take_slot(ROOT) {
            self.publish(st, len);
        }
    }

    /// Frees the request's private KV and slots and unlocks its node.
    fn release(&mut self, st: Req) {
        let private = self.private_of(&st);
        self.full.put(private);
        self.private -= private;
        self.tree.unlock(st.node);
        self.tree.state_unlock(st.node);
        self.held -= u64::from(st.working) + u64::from(st.tracks);
    }

    /// Runs `f` on a copy of request `req`'s state, written back in place — not taken out and
    /// put back, which would move the live states around on calls made every step; `None` when
    /// it holds none.
    fn with_req<T>(&mut self, req: ReqId, f: impl FnOnce(&mut Self, &mut Req) -> T) -> Option<T> {
        let mut st = *self.reqs.get(req)?;
        let out = f(self, &mut st);
        *self.reqs.get_mut(req).expect("still live") = st;
        Some(out)
    }

    /// The deferred insert of a request whose prefill ended and which runs on.
    fn settle_pending(&mut self) {
        if let Some(req) = self.pending.take() {
            self.with_req(req, |c, st| c.checkpoint_insert(st));
        }
    }
}

impl PrefixCache for MambaCache {
    fn spec(&self) -> CacheSpec {
        CacheSpec {
            policy: Policy::Radix,
            block_size: None,
            page_size: Some(self.page as u32),
            capacity_tokens: self.full.capacity,
            hybrid: None,
            sglang_pool: Some(SglangPool::States(self.layout)),
        }
    }

    fn peek(&self, seq: SeqId, known: usize) -> usize {
        self.tree.peek_mamba(&self.store, seq, known.saturating_sub(1))
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
        let f = self.tree.match_mamba(&self.store, seq, known.saturating_sub(1));
        // The hit's state is copied into a slot of the request's own: the one its match took,
        // else one taken now.
        let working = f.node != ROOT && (self.claim_cow() || self.take_slot(f.node));
        if f.node != ROOT && !working {
            return None;
        }
        self.tree.lock(f.node);
        self.tree.state_lock(f.node);
        let new = (known - f.hit).min(max_new_tokens);
        if !self.alloc((self.slots_for(f.hit + new) - f.hit) as u64) {
            self.tree.unlock(f.node);
            self.tree.state_unlock(f.node);
            self.held -= u64::from(working);
            return None;
        }
        let aligned = f.full / self.grid * self.grid;
        let st = Req {
            seq,
            node: f.node,
            cached: f.hit,
            allocated: f.hit + new,
            computed: f.hit,
            prefill_end: known,
            inserted_at: f.hit,
            working,
            tracks: 0,
            branch: (aligned > f.hit).then_some(aligned),
            last_track: None,
        };
        self.reqs.put(req, st);
        Some(Admitted { hit_tokens: f.hit, allocated_tokens: f.hit + new })
    }

    fn end_admission(&mut self) {
        self.held -= self.cow;
        self.cow = 0;
    }

    fn bind_states(&mut self, reqs: &[ReqId]) {
        self.settle_pending();
        let need: u64 = reqs.iter().filter_map(|&r| self.reqs.get(r)).map(|st| self.missing(st)).sum();
        let free = self.free_slots();
        if free < need {
            self.evict_states(need - free);
        }
        for &r in reqs {
            self.with_req(r, |c, st| c.grant(st));
        }
    }

    fn grow(&mut self, req: ReqId, total_tokens: usize) -> bool {
        self.settle_pending();
        self.with_req(req, |c, st| {
            let need = c.missing(st);
            if need > 0 {
                let free = c.free_slots();
                if free < need {
                    c.evict_states(need - free);
                }
                if !c.grant(st) {
                    return false;
                }
            }
            let ok =
                total_tokens <= st.allocated || c.alloc((c.slots_for(total_tokens) - c.slots_for(st.allocated)) as u64);
            if ok {
                st.allocated = st.allocated.max(total_tokens);
            }
            ok
        })
        .expect("request admitted")
    }

    fn computed(&mut self, req: ReqId, computed_tokens: usize) {
        self.settle_pending();
        let (extra, grid, track_grid) = (self.extra(), self.grid, self.track_grid);
        let (chunk, state_chunk) = (self.layout.cache_chunk as usize, (self.layout.state_chunk as usize).max(1));
        let st = self.reqs.get_mut(req).expect("a live request");
        debug_assert!(computed_tokens <= st.allocated, "computed tokens without slots");
        let (p, n) = (st.computed, computed_tokens);
        if extra && n > p {
            if n <= st.prefill_end {
                // A prefill chunk (`_mamba_radix_cache_v2_req_prepare_for_extend`): tracked when
                // it spans the grid, at the prefix plus the grid's floor of its length, or at the
                // match's branching point where that falls inside it on the cache chunk.
                let e = n - p;
                if e >= grid {
                    let mut t = p + e / grid * grid;
                    let kernel = p + e / state_chunk * state_chunk;
                    let limit = if kernel != t { t + 1 } else { n };
                    if let Some(b) = st.branch.filter(|&b| b > p && b < limit && (b - p) % chunk.max(1) == 0) {
                        t = b;
                    }
                    st.last_track = Some(t);
                }
            } else if n.is_multiple_of(track_grid) {
                // A decode step reaching the track grid (`prepare_for_decode`'s track mask,
                // `_mamba_prefix_cache_update`).
                st.last_track = Some(n);
            }
        }
        st.computed = st.computed.max(n);
        if n == st.prefill_end {
            self.pending = Some(req);
        }
    }

    fn finish(&mut self, req: ReqId) {
        if self.pending == Some(req) {
            self.pending = None;
        } else {
            self.settle_pending();
        }
        let mut st = self.reqs.take(req);
        // `release_kv_cache(checkpoint=True)`: the state at the key's end goes to the tree —
        // its own slot (no_buffer) or the slot holding its last tracked state (extra_buffer,
        // `_select_finished_checkpoint`; none tracked: nothing is inserted).
        let up_to = if self.extra() { st.last_track.filter(|&t| t <= st.computed) } else { Some(st.computed) };
        let holds = if self.extra() { st.tracks > 0 } else { st.working };
        if let Some(len) = up_to.filter(|&l| holds && l > 0 && self.floor(l) >= st.cached) {
            if self.extra() {
                st.tracks -= 1;
            } else {
                st.working = false;
            }
            self.publish(&mut st, len);
        }
        self.release(st);
    }

    fn preempt(&mut self, req: ReqId) {
        self.settle_pending();
        let st = self.reqs.take(req);
        self.release(st);
    }

    fn checkpoint(&mut self, req: ReqId) {
        self.settle_pending();
        // A chunk that computed nothing since its last insert inserts nothing
        // (`get_next_batch_to_run`: `extend_end > prefix_len`).
        self.with_req(req, |c, st| {
            if st.computed <= st.prefill_end && st.computed != st.inserted_at {
                c.checkpoint_insert(st);
            }
        });
    }

    fn settle(&mut self) {
        self.settle_pending();
        self.end_admission();
    }

    fn touch(&mut self, seq: SeqId, known: usize) -> (usize, u64) {
        self.settle_pending();
        let f = self.tree.match_mamba(&self.store, seq, known.saturating_sub(1));
        (f.hit, self.tree.unlocked_above(f.node))
    }

    fn touch_tiers(&mut self, seq: SeqId, known: usize) -> Touched {
        self.settle_pending();
        // A match no admission claimed gives its slot back first.
        self.end_admission();
        let f = self.tree.match_mamba(&self.store, seq, known.saturating_sub(1));
        if f.node != ROOT && self.take_slot(f.node) {
            self.cow += 1;
        }
        Touched { hit: f.hit, pinned: self.tree.unlocked_above(f.node), host: 0, window_pinned: 0 }
    }

    fn touch_prefix(&mut self, seq: SeqId, len: usize) -> usize {
        self.settle_pending();
        self.tree.match_mamba(&self.store, seq, len).hit
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

    fn state_usage(&self) -> Option<Usage> {
        Some(Usage {
            used_tokens: self.layout.slots - self.free_slots(),
            evictable_tokens: self.tree.states_evictable(),
            capacity_tokens: Some(self.layout.slots),
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
        let held: u64 = self.reqs.live().map(|s| u64::from(s.working) + u64::from(s.tracks)).sum();
        assert_eq!(held + self.cow, self.held, "state slots held by requests");
        assert!(self.tree.states() + self.held <= self.layout.slots, "state pool overdrawn");
        if self.reqs.live().next().is_none() {
            assert_eq!(self.tree.protected_tokens(), 0, "idle cache with locked nodes");
            assert_eq!(self.tree.states_protected(), 0, "idle cache with locked states");
        }
        for st in self.reqs.live() {
            assert!(st.cached <= st.allocated && (st.node != ROOT || st.cached == 0), "request state");
            assert!(st.node == ROOT || self.tree.has_state(st.node), "a locked node without its state");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::conformance::{admit_or_apply, op_strategy, seqs_strategy, Live};
    use super::*;
    use proptest::prelude::*;
    // The strategy of this module, not proptest's trait.
    use super::Strategy;

    /// (full free, full evictable, full protected | states free, evictable, protected, held by
    /// requests), as SGLang's allocators and tree report them.
    fn counters(c: &MambaCache) -> (u64, u64, u64, u64, u64, u64, u64) {
        c.check_invariants();
        let t = &c.tree;
        (
            c.full.available(),
            t.evictable_tokens(),
            t.protected_tokens(),
            c.free_slots(),
            t.states_evictable(),
            t.states_protected(),
            c.held,
        )
    }

    fn layout(slots: u64, strategy: Strategy, chunk: u32) -> MambaLayout {
        MambaLayout { slots, strategy, track_slots: 1, cache_chunk: chunk, state_chunk: chunk, track_interval: 16 }
    }

    /// A request's first prefill step as SGLang's scheduler runs it: the match (and its
    /// copy-on-write slot), the admission, the batch's state slots, the KV of `n` tokens, the
    /// step's end. Returns the hit.
    fn prefill(c: &mut MambaCache, req: ReqId, known: usize, n: usize) -> usize {
        let touched = c.touch_tiers(req, known);
        let a = c.admit(req, req, known, 0).expect("admitted");
        assert_eq!(a.hit_tokens, touched.hit);
        c.end_admission();
        c.bind_states(&[req]);
        assert!(c.ensure_free(n as u64));
        assert!(c.grow(req, a.hit_tokens + n));
        c.computed(req, a.hit_tokens + n);
        a.hit_tokens
    }

    /// The next chunk of a chunked prefill, or a decode step, up to `total` tokens.
    fn step(c: &mut MambaCache, req: ReqId, total: usize) {
        assert!(c.grow(req, total));
        c.computed(req, total);
    }

    fn out(req: u32, n: u32) -> impl Iterator<Item = u32> {
        (0..n).map(move |j| 10_000_000 + req * 100_000 + j)
    }

    /// no_buffer, 64 KV tokens, 12 state slots. A (a 10-token prompt, 3 outputs) keeps a copy
    /// of its state at its prompt's end and donates its own at its finish; B, A's prompt again,
    /// misses (its key stops a token short and splits the node whose state is at 10, the upper
    /// part without one); C, A's prompt and outputs and 4 more, hits A's finish state. Counters
    /// worked by hand from SGLang 0.5.23's `MambaComponent` and checked against its real classes
    /// on CPU.
    #[test]
    fn a_resent_prompt_misses_and_its_continuation_hits() {
        let a: Vec<u32> = (100..110).collect();
        let s0: Vec<u32> = a.iter().copied().chain(out(0, 3)).collect();
        let s1: Vec<u32> = a.iter().copied().chain(out(1, 2)).collect();
        let s2: Vec<u32> = a.iter().copied().chain(out(0, 2)).chain(500..504).chain(out(2, 2)).collect();
        let store = Arc::new(TokenStore::from_seqs(&[s0, s1, s2]));
        let mut c = MambaCache::new(store, 1, 64, layout(12, Strategy::NoBuffer, 64));
        assert_eq!(prefill(&mut c, 0, 10, 10), 0);
        c.settle();
        // The prompt's end holds a copy of A's state, locked; A holds its working slot.
        assert_eq!(counters(&c), (54, 0, 10, 10, 0, 1, 1));
        step(&mut c, 0, 11);
        step(&mut c, 0, 12);
        c.finish(0);
        assert_eq!(counters(&c), (52, 12, 0, 10, 2, 0, 0));
        // B: the full match reaches 9 tokens, but no node ends there with a state.
        assert_eq!(c.peek(1, 10), 0);
        assert_eq!(prefill(&mut c, 1, 10, 10), 0);
        c.settle();
        // Its prompt-end copy lands on [9, 10), which holds A's state: the copy is freed.
        assert_eq!(counters(&c), (52, 2, 10, 9, 1, 1, 1));
        step(&mut c, 1, 11);
        c.finish(1);
        assert_eq!(counters(&c), (51, 13, 0, 9, 3, 0, 0));
        // C hits A's finish state at 12: copied into a slot of its own at the match.
        assert_eq!(prefill(&mut c, 2, 16, 4), 12);
        c.settle();
        assert_eq!(counters(&c), (47, 1, 16, 7, 3, 1, 1));
    }

    /// Chunks of 4: A = S(8) + a(4) gets a state at each chunk's end (4, 8) and its prompt's
    /// (12); its sibling B = S + b(4) hits 8, the chunk end inside the shared prefix.
    #[test]
    fn a_sibling_hits_at_a_chunk_end() {
        let s: Vec<u32> = (100..108).collect();
        let s0: Vec<u32> = s.iter().copied().chain(200..204).chain(out(0, 2)).collect();
        let s1: Vec<u32> = s.iter().copied().chain(300..304).chain(out(1, 2)).collect();
        let store = Arc::new(TokenStore::from_seqs(&[s0, s1]));
        let mut c = MambaCache::new(store, 1, 64, layout(12, Strategy::NoBuffer, 64));
        assert_eq!(prefill(&mut c, 0, 12, 4), 0);
        assert_eq!(counters(&c), (60, 0, 0, 11, 0, 0, 1));
        // The next pass publishes the chunk (`stash_chunked_request`) before the next runs.
        c.checkpoint(0);
        step(&mut c, 0, 8);
        assert_eq!(counters(&c), (56, 0, 4, 10, 0, 1, 1));
        c.checkpoint(0);
        step(&mut c, 0, 12);
        c.settle();
        assert_eq!(counters(&c), (52, 0, 12, 8, 2, 1, 1));
        assert_eq!(c.peek(1, 12), 8);
        assert_eq!(prefill(&mut c, 1, 12, 4), 8);
        c.settle();
        assert_eq!(counters(&c), (48, 0, 16, 6, 2, 2, 2));
    }

    /// A's prompt [0, 10) and finish [10, 12) states; evicting the least recent state makes the
    /// internal [0, 10) a tombstone (its KV stays) and the continuation still hits 12; evicting
    /// two more — the continuation's hit and its prompt's copy — leaves a 12-token full match
    /// without a state on its path: the next continuation recomputes all 16 tokens.
    #[test]
    fn an_evicted_internal_state_leaves_a_tombstone() {
        let a: Vec<u32> = (100..110).collect();
        let s0: Vec<u32> = a.iter().copied().chain(out(0, 3)).collect();
        let s1: Vec<u32> = a.iter().copied().chain(out(0, 2)).chain(500..504).chain(out(1, 2)).collect();
        let s2: Vec<u32> = a.iter().copied().chain(out(0, 2)).chain(600..604).chain(out(2, 2)).collect();
        let store = Arc::new(TokenStore::from_seqs(&[s0, s1, s2]));
        let mut c = MambaCache::new(store, 1, 64, layout(12, Strategy::NoBuffer, 64));
        prefill(&mut c, 0, 10, 10);
        step(&mut c, 0, 11);
        step(&mut c, 0, 12);
        c.finish(0);
        c.evict_states(1);
        assert_eq!(counters(&c), (52, 12, 0, 11, 1, 0, 0));
        assert_eq!(prefill(&mut c, 1, 16, 4), 12);
        c.settle();
        assert_eq!(counters(&c), (48, 0, 16, 9, 1, 1, 1));
        step(&mut c, 1, 17);
        c.finish(1);
        assert_eq!(counters(&c), (47, 17, 0, 9, 3, 0, 0));
        c.evict_states(2);
        assert_eq!(counters(&c), (47, 17, 0, 11, 1, 0, 0));
        assert_eq!(prefill(&mut c, 2, 16, 16), 0);
        c.settle();
        assert_eq!(counters(&c), (43, 5, 16, 9, 1, 1, 1));
    }

    /// A KV eviction takes the least recent unlocked leaf — A's outputs [10, 12) — whole, its
    /// state with it: [0, 10) is a leaf again and the continuation hits 10. A state eviction
    /// that reaches an unlocked leaf also takes its KV.
    #[test]
    fn an_evicted_leaf_takes_its_kv_and_state() {
        let a: Vec<u32> = (100..110).collect();
        let s0: Vec<u32> = a.iter().copied().chain(out(0, 3)).collect();
        let s1: Vec<u32> = a.iter().copied().chain(out(0, 2)).chain(500..504).chain(out(1, 2)).collect();
        let store = Arc::new(TokenStore::from_seqs(&[s0, s1]));
        let mut c = MambaCache::new(store, 1, 64, layout(12, Strategy::NoBuffer, 64));
        prefill(&mut c, 0, 10, 10);
        step(&mut c, 0, 11);
        step(&mut c, 0, 12);
        c.finish(0);
        let freed = c.tree.evict(1);
        c.full.put(freed);
        assert_eq!(freed, 2);
        assert_eq!(counters(&c), (54, 10, 0, 11, 1, 0, 0));
        assert_eq!(prefill(&mut c, 1, 16, 6), 10);
        c.settle();
        assert_eq!(counters(&c), (48, 0, 16, 9, 1, 1, 1));
        step(&mut c, 1, 17);
        c.finish(1);
        assert_eq!(counters(&c), (47, 17, 0, 9, 3, 0, 0));
        // The least recent state is [0, 10), internal: a tombstone; then [10, 16), internal
        // too; then the leaf [16, 17), deleted with its token.
        c.evict_states(3);
        assert_eq!(counters(&c), (48, 16, 0, 12, 0, 0, 0));
    }

    /// extra_buffer, checkpoint grid 8, track grid 16, chunks of 12: A (30 tokens, 6 outputs)
    /// tracks 8 and 20 in its first two chunks (a 6-token chunk tracks nothing) and 32 in
    /// decode, inserting only there; B = A's first 25 tokens and 3 more hits 20, its branching
    /// point 24 off the chunk grid from 20, and tracks 28.
    #[test]
    fn extra_buffer_inserts_at_tracked_points() {
        let a: Vec<u32> = (100..130).collect();
        let s0: Vec<u32> = a.iter().copied().chain(out(0, 6)).collect();
        let s1: Vec<u32> = a[..25].iter().copied().chain(300..303).chain(out(1, 2)).collect();
        let store = Arc::new(TokenStore::from_seqs(&[s0, s1]));
        let mut c = MambaCache::new(store, 1, 128, layout(16, Strategy::ExtraBuffer, 8));
        prefill(&mut c, 0, 30, 12);
        // A holds its working slot and a ping-pong slot.
        assert_eq!(counters(&c), (116, 0, 0, 14, 0, 0, 2));
        c.checkpoint(0);
        step(&mut c, 0, 24);
        assert_eq!(counters(&c), (104, 0, 8, 13, 0, 1, 2));
        c.checkpoint(0);
        step(&mut c, 0, 30);
        c.settle();
        assert_eq!(counters(&c), (98, 0, 20, 12, 1, 1, 2));
        for k in 31..=35 {
            step(&mut c, 0, k);
        }
        c.finish(0);
        // Only [0, 32) is cached: the KV of 32..35 is freed.
        assert_eq!(counters(&c), (96, 32, 0, 13, 3, 0, 0));
        assert_eq!(prefill(&mut c, 1, 28, 8), 20);
        c.settle();
        assert_eq!(counters(&c), (93, 7, 28, 10, 3, 1, 2));
        assert_eq!(c.peek(1, 29), 28);
    }

    /// The admission loop's match takes the copy-on-write slot; a request it does not admit
    /// gives it back at the loop's end.
    #[test]
    fn an_unadmitted_match_returns_its_slot() {
        let s0: Vec<u32> = (0..12).collect();
        let store = Arc::new(TokenStore::from_seqs(&[s0.clone(), s0]));
        let mut c = MambaCache::new(store, 1, 64, layout(6, Strategy::NoBuffer, 64));
        prefill(&mut c, 0, 10, 10);
        step(&mut c, 0, 11);
        c.finish(0);
        assert_eq!(counters(&c), (53, 11, 0, 4, 2, 0, 0));
        assert_eq!(c.touch_tiers(1, 12).hit, 11);
        assert_eq!(counters(&c), (53, 11, 0, 3, 2, 0, 1));
        c.end_admission();
        assert_eq!(counters(&c), (53, 11, 0, 4, 2, 0, 0));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// Random lifecycles with admission matches, batch slot binding, checkpoints and
        /// evictions of KV and of states, under both strategies: both pools stay within their
        /// sizes, the counters and the state list stay consistent, and an idle cache holds
        /// nothing locked in either pool.
        #[test]
        fn random_operations_keep_both_pools_consistent(
            seqs in seqs_strategy(),
            ops in prop::collection::vec((op_strategy(), 0u8..6), 1..80),
            full in 16u64..160,
            slots in 3u64..16,
            extra in prop::bool::ANY,
            chunk in prop::sample::select(vec![4u32, 8]),
        ) {
            let st = Arc::new(TokenStore::from_seqs(&seqs));
            let strategy = if extra { Strategy::ExtraBuffer } else { Strategy::NoBuffer };
            let l = MambaLayout { track_interval: 8, ..layout(slots, strategy, chunk) };
            let mut c = MambaCache::new(st.clone(), 1, full, l);
            let mut live: Vec<Option<Live>> = vec![None; 6];
            for (op, extra) in &ops {
                admit_or_apply(&mut c, op, &mut live, &st, 1)?;
                match extra {
                    1 => {
                        let seq = (live.len() % st.num_seqs()) as SeqId;
                        c.touch_tiers(seq, st.seq_len(seq));
                        c.end_admission();
                    }
                    2 => {
                        if let Some(req) = live.iter().position(Option::is_some) {
                            c.checkpoint(req as ReqId);
                        }
                    }
                    3 => {
                        c.ensure_free(full / 2);
                    }
                    4 => c.evict_states(slots / 2),
                    5 => {
                        let ids: Vec<ReqId> =
                            live.iter().enumerate().filter(|l| l.1.is_some()).map(|l| l.0 as ReqId).collect();
                        c.bind_states(&ids);
                    }
                    _ => c.settle(),
                }
                let (u, s) = (c.usage(), c.state_usage().expect("a state pool"));
                prop_assert!(u.used_tokens <= full && s.used_tokens <= slots);
                c.check_invariants();
            }
            for (req, l) in live.iter().enumerate() {
                if l.is_some() {
                    c.finish(req as ReqId);
                }
            }
            c.check_invariants();
            let (u, s) = (c.usage(), c.state_usage().expect("a state pool"));
            prop_assert_eq!(u.used_tokens, u.evictable_tokens, "idle cache holds pinned KV");
            prop_assert_eq!(s.used_tokens, s.evictable_tokens, "idle cache holds pinned or held states");
            // Everything unlocked goes when asked.
            c.evict_states(slots);
            prop_assert!(c.ensure_free(c.full.capacity.expect("bounded")));
            prop_assert_eq!(c.state_usage().expect("a state pool").used_tokens, 0);
            c.check_invariants();
        }
    }
}
