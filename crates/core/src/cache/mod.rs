//! Prefix caches. One small trait, [`PrefixCache`], driven by a request's lifecycle (admit,
//! grow, computed, finish, preempt); each implementation decides — by its engine's rules —
//! what is matched (alignment, last token recomputed), when new KV becomes shareable, what is
//! evicted first and what preemption keeps:
//! - [`paged::PagedCache`]: vLLM v1 automatic prefix caching (ENGINE_SPEC §1);
//! - [`radix::TreeCache::sglang`]: SGLang RadixAttention (§3.2–3.3);
//! - [`radix::TreeCache::lightllm`]: LightLLM TokenAttention + its radix prompt cache (§4);
//! - [`swa::SwaCache`], [`mamba::MambaCache`]: SGLang's radix cache for models with
//!   sliding-window layers and with linear-attention layers ([`SglangPool`]);
//! - [`NoCache`]: no reuse, the baseline.

pub mod hicache;
pub mod hybrid;
pub(crate) mod lru;
pub mod mamba;
pub mod paged;
pub mod radix;
pub mod storage;
pub mod swa;
pub mod token_pool;
pub mod tree;

use crate::workload::{SeqId, TokenStore};
use serde::Serialize;
use std::sync::Arc;

/// Request handle: the request's index in its workload.
pub type ReqId = u32;

/// Cache models (`--policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// vLLM v1 paged blocks with automatic prefix caching.
    Paged,
    /// SGLang RadixAttention (token radix tree, optional pages).
    Radix,
    /// LightLLM TokenAttention pool with its radix prompt cache.
    Token,
    /// No prefix reuse.
    None,
}

impl Policy {
    /// Every policy, in report order.
    pub const ALL: [Policy; 4] = [Policy::Paged, Policy::Radix, Policy::Token, Policy::None];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Paged => "paged",
            Policy::Radix => "radix",
            Policy::Token => "token",
            Policy::None => "none",
        }
    }
}

/// What to build: a policy, its granularity and its capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CacheSpec {
    pub policy: Policy,
    /// Tokens per block (paged only).
    pub block_size: Option<u32>,
    /// Tokens per page (radix only).
    pub page_size: Option<u32>,
    /// KV capacity in tokens; `None` = unlimited. A hybrid pool's blocks × block size.
    pub capacity_tokens: Option<u64>,
    /// Paged only: vLLM's hybrid KV cache manager's groups, for a model with sliding-window
    /// layers ([`hybrid::HybridCache`]); `None`: one group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hybrid: Option<hybrid::HybridLayout>,
    /// Radix only: SGLang's pool beside the full-attention one for a hybrid model — the window
    /// pool of a model with sliding-window layers or the state pool of one with linear-attention
    /// layers ([`SglangPool`]); `None`: full attention. Written as `swa` or `mamba`.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub sglang_pool: Option<SglangPool>,
}

/// SGLang's second pool of a hybrid model, beside its full-attention KV pool (both 0.5.23
/// `UnifiedRadixCache` components).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SglangPool {
    /// Sliding-window layers' KV ([`swa::SwaCache`]).
    #[serde(rename = "swa")]
    Window(swa::SwaLayout),
    /// Linear-attention layers' recurrent states ([`mamba::MambaCache`]).
    #[serde(rename = "mamba")]
    States(mamba::MambaLayout),
}

impl CacheSpec {
    /// SGLang's window pool, where the spec has one.
    pub fn window(&self) -> Option<swa::SwaLayout> {
        match self.sglang_pool {
            Some(SglangPool::Window(w)) => Some(w),
            _ => None,
        }
    }

    /// SGLang's recurrent-state pool, where the spec has one.
    pub fn states(&self) -> Option<mamba::MambaLayout> {
        match self.sglang_pool {
            Some(SglangPool::States(m)) => Some(m),
            _ => None,
        }
    }
}

impl CacheSpec {
    /// Builds the cache this spec describes over a workload's token store.
    pub fn build(&self, store: Arc<TokenStore>) -> Box<dyn PrefixCache> {
        self.build_for(store, None)
    }

    /// [`build`](Self::build) for a run that touches only the sequences `seqs` (`None`: any),
    /// which spares the paged cache numbering the blocks of the others.
    pub fn build_for(&self, store: Arc<TokenStore>, seqs: Option<&[SeqId]>) -> Box<dyn PrefixCache> {
        self.build_sized(store, seqs, true)
    }

    /// [`build_for`](Self::build_for) for one instance of several, which touches only the part
    /// of its content index its own requests' blocks map to: the index is left to lazily zeroed
    /// pages instead of written up front (`dense` = false).
    pub fn build_sized(&self, store: Arc<TokenStore>, seqs: Option<&[SeqId]>, dense: bool) -> Box<dyn PrefixCache> {
        match self.policy {
            // vLLM's hybrid manager, also with prefix caching off for Mamba groups.
            Policy::Paged | Policy::None if self.hybrid.is_some() => Box::new(hybrid::HybridCache::new(
                store,
                self.block_size.unwrap_or(16),
                self.capacity_tokens
                    .map(|c| (c / self.block_size.unwrap_or(16) as u64 + 1).min(u32::MAX as u64) as u32),
                self.hybrid.expect("checked"),
            )),
            Policy::Paged => paged::boxed(store, self.block_size.unwrap_or(16), self.capacity_tokens, seqs, dense),
            Policy::Radix | Policy::None if self.window().is_some() => Box::new(swa::SwaCache::new(
                store,
                self.page_size.unwrap_or(1),
                self.capacity_tokens.expect("a window pool sizes its full pool too"),
                self.window().expect("checked"),
            )),
            Policy::Radix if self.states().is_some() => Box::new(mamba::MambaCache::new(
                store,
                self.page_size.unwrap_or(1),
                self.capacity_tokens.expect("a state pool sizes its full pool too"),
                self.states().expect("checked"),
            )),
            Policy::Radix => {
                Box::new(radix::TreeCache::sglang(store, self.page_size.unwrap_or(1), self.capacity_tokens))
            }
            Policy::Token => Box::new(radix::TreeCache::lightllm(store, self.capacity_tokens)),
            Policy::None => Box::new(NoCache::paged(self.capacity_tokens, self.page_size.unwrap_or(1))),
        }
    }
}

/// Memory held by a cache, in token slots.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Slots holding KV (in use by requests or cached and evictable).
    pub used_tokens: u64,
    /// Slots that can be freed by eviction.
    pub evictable_tokens: u64,
    /// Total slots; `None` = unlimited.
    pub capacity_tokens: Option<u64>,
}

/// Counters every cache keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Cached tokens dropped to make room.
    pub evicted_tokens: u64,
    /// Highest `used_tokens` seen.
    pub peak_used_tokens: u64,
    /// Paged only: Σ over finished or preempted requests of unused slots in their last block.
    pub partial_block_waste_tokens: u64,
}

impl CacheStats {
    /// Adds another instance's counters: evictions and waste add up; the peak is the largest
    /// instance's.
    pub fn merge(&mut self, o: &CacheStats) {
        self.evicted_tokens += o.evicted_tokens;
        self.peak_used_tokens = self.peak_used_tokens.max(o.peak_used_tokens);
        self.partial_block_waste_tokens += o.partial_block_waste_tokens;
    }
}

/// What a scheduler pass's lookup found ([`PrefixCache::touch_tiers`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Touched {
    /// Tokens cached on the device.
    pub hit: usize,
    /// Of them, the evictable ones (what pinning the match takes from the evictable budget).
    pub pinned: u64,
    /// Tokens past the hit held on the host alone.
    pub host: usize,
    /// Under a window pool ([`swa::SwaCache`]), its evictable slots pinning the match takes.
    pub window_pinned: u64,
}

/// Result of a successful [`PrefixCache::admit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// Prompt tokens reused from the cache (their KV need not be computed).
    pub hit_tokens: usize,
    /// Tokens the request now has KV slots for (hit + newly scheduled).
    pub allocated_tokens: usize,
}

/// The release-dependent rules of the engine that drives a cache, built by the engine bundle
/// (the engine's `Rules::cache_rules`) and handed to [`PrefixCache::follow`] once, before the
/// first request. The cache never names an engine: it reads only these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheRules {
    /// Paged: freed blocks without a hash go to the front of the free queue, hashed ones to the
    /// tail (vLLM `BlockPool.free_blocks`, PR #42656, first in 0.24.0); before, all went to the
    /// tail.
    pub free_unhashed_first: bool,
    /// Radix: the driving scheduler is SGLang's, with that release's eviction and prompt split;
    /// an unfinished prefill chunk is published only at [`PrefixCache::checkpoint`]
    /// (`stash_chunked_request`). `None`: another engine's scheduler (LightLLM's token cache
    /// ignores it too).
    pub sglang: Option<SglangCacheRules>,
}

impl CacheRules {
    /// The rules a cache follows until told otherwise: those of the newest vLLM bundle
    /// (a test in `engine` keeps the two equal).
    pub const NEWEST_VLLM: CacheRules = CacheRules { free_unhashed_first: true, sglang: None };
}

/// SGLang's release-dependent radix-cache rules (part of [`CacheRules`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SglangCacheRules {
    /// Eviction frees only the shortfall `n − available` (`evict_to_free_tokens`, 0.5.23).
    pub evict_shortfall: bool,
    /// An insert also splits the path at the prompt's end (`RadixCache.checkpoint`, 0.5.23).
    pub split_prompt: bool,
}

/// A prefix-cache model. Requests go through `admit` → (`grow` / `computed`)* →
/// `finish` or `preempt`; after `preempt` the request may be admitted again.
pub trait PrefixCache: Send {
    /// What this cache is.
    fn spec(&self) -> CacheSpec;

    /// Prompt tokens a new request with known tokens `seq[..known]` would reuse now.
    /// Read-only: no recency update, no pinning (for routers).
    fn peek(&self, seq: SeqId, known: usize) -> usize;

    /// Starts (or resumes) request `req` whose known tokens are `seq[..known]`: matches the
    /// cached prefix (the last known token is always recomputed; hits are block/page aligned),
    /// pins it, and allocates slots for up to `max_new_tokens` further tokens. `None` when the
    /// memory is short even after eviction; nothing is pinned or allocated then.
    fn admit(&mut self, req: ReqId, seq: SeqId, known: usize, max_new_tokens: usize) -> Option<Admitted> {
        self.admit_reserving(req, seq, known, max_new_tokens, 0)
    }

    /// [`admit`](Self::admit) that also refuses (`None`, nothing changed) unless slots for the
    /// request's first `reserve_tokens` tokens, less its hit, could all be had now — free or
    /// freed by eviction, a hit that is itself evictable counting as taken. vLLM 0.33's
    /// whole-sequence admission (`allocate_slots(..., full_sequence_must_fit=True)`) passes
    /// `known`; 0 checks only what is allocated.
    fn admit_reserving(
        &mut self,
        req: ReqId,
        seq: SeqId,
        known: usize,
        max_new_tokens: usize,
        reserve_tokens: usize,
    ) -> Option<Admitted>;

    /// Admits `req` as an outside tier's load into it (vLLM's KV connector:
    /// `allocate_slots(..., num_external_computed_tokens, delay_cache_blocks=True)`): pins the
    /// cached prefix [`peek`](Self::peek) finds now and allocates slots for `external` tokens
    /// past it, to be filled by the load and registered only when it lands
    /// ([`loaded`](Self::loaded)); refuses (`None`, nothing changed) as
    /// [`admit_reserving`](Self::admit_reserving) does. Caches that take no outside tier refuse.
    fn admit_external(
        &mut self,
        _req: ReqId,
        _seq: SeqId,
        _known: usize,
        _external: usize,
        _reserve_tokens: usize,
    ) -> Option<Admitted> {
        None
    }

    /// The outside tier's tokens of `req` landed: what it holds within its first
    /// `computed_tokens` tokens becomes shareable (vLLM `KVCacheManager.cache_blocks`).
    fn loaded(&mut self, _req: ReqId, _computed_tokens: usize) {}

    /// Starts logging the blocks the cache stores and removes — vLLM's KV events
    /// (`BlockStored`, `BlockRemoved`, published after each step), as content keys
    /// ([`visit_block_keys`](Self::visit_block_keys)); `false` for a cache that cannot (only the
    /// paged cache can).
    fn log_kv_events(&mut self) -> bool {
        false
    }

    /// Moves the events logged since the last call into `out`: (content key, stored).
    fn take_kv_events(&mut self, _out: &mut Vec<(u32, bool)>) {}

    /// Hands `visit` the content keys of full blocks `from..to` of `seq` in order, until it
    /// returns `false` — keys equal for two blocks exactly when their sequences agree up to the
    /// blocks' ends, the identity vLLM's chained block hashes stand for — where the cache keys
    /// blocks so (paged; `true`); `false` for a cache that does not.
    fn visit_block_keys(&self, _seq: SeqId, _from: usize, _to: usize, _visit: &mut dyn FnMut(u32) -> bool) -> bool {
        false
    }

    /// [`grow`](Self::grow) that also refuses (`false`, nothing changed) unless slots for the
    /// request's first `reserve_tokens` tokens could all be had now (vLLM 0.33's whole-sequence
    /// admission of a waiting request that already holds slots). Caches without that rule grow
    /// what is scheduled.
    fn grow_reserving(&mut self, req: ReqId, total_tokens: usize, _reserve_tokens: usize) -> bool {
        self.grow(req, total_tokens)
    }

    /// [`grow`](Self::grow) to `total_tokens` known tokens with `lookahead` empty slots beyond
    /// them (vLLM V0 multi-step's lookahead slots: `SelfAttnBlockSpaceManager.append_slots`
    /// appends the sequence's unseen token ids and then `ensure_num_empty_slots`): the slots
    /// are allocated, but only blocks full of known tokens are cached. `false` (and no change)
    /// when memory is short. Caches that cache nothing ahead grow to the sum.
    fn grow_ahead(&mut self, req: ReqId, total_tokens: usize, lookahead: usize) -> bool {
        self.grow(req, total_tokens + lookahead)
    }

    /// Adopts the rules of the engine release that drives this cache: vLLM's free order (paged);
    /// under SGLang's scheduler, that release's eviction and prompt split, and publication of an
    /// unfinished prefill chunk only when the scheduler calls [`checkpoint`](Self::checkpoint)
    /// (SGLang `stash_chunked_request`) rather than when the chunk's step ends (radix). Caches
    /// without such a rule ignore it. Called once, before the first request.
    fn follow(&mut self, _rules: &CacheRules) {}

    /// Ensures slots for the request's first `total_tokens` tokens, evicting unpinned cache
    /// entries in the engine's order. `false` (and no change) when memory is short.
    fn grow(&mut self, req: ReqId, total_tokens: usize) -> bool;

    /// The most tokens `grow` can give running request `req` with nothing allocated,
    /// registered or evicted — only its token count moving — or `None` where the cache does
    /// not say (then a run steps every engine step: [`grow_quietly`](Self::grow_quietly)).
    fn quiet_until(&self, _req: ReqId) -> Option<usize> {
        None
    }

    /// One decode step's growth of the running requests that allocate or register a block in
    /// it — `(request, total tokens)` in batch order — done only when it cannot fail and, with
    /// a waiting request `refused` at the queue's head (refused in the step before), cannot
    /// change what that request would find: nothing it hits is evicted and the first block it
    /// misses is not registered. Returns whether it was done (`false`: nothing changed). A run
    /// coalescing decode steps calls this in place of the steps' `grow` calls
    /// (`sim::instance::coalesce`); the default never grows.
    fn grow_quietly(&mut self, _reqs: &[(ReqId, usize)], _refused: Option<ReqId>) -> bool {
        false
    }

    /// Whether [`grow_quietly`](Self::grow_quietly) can grow past a refused waiting head (it
    /// knows what the head's retries would find); `false`: a stretch with a refused head is not
    /// tried at all, its first growth would end it.
    fn grows_past_refused(&self) -> bool {
        true
    }

    /// The engine has computed the request's first `computed_tokens` tokens (end of a step).
    fn computed(&mut self, req: ReqId, computed_tokens: usize);

    /// Whether [`computed`](Self::computed) does anything: a run that calls it per request per
    /// step skips the calls when not.
    fn tracks_computed(&self) -> bool {
        true
    }

    /// Whether [`computed`](Self::computed) only records the count for the request's next
    /// growth, so that a run coalescing decode steps may skip the calls: `grow_quietly` then
    /// takes each growing request's count to be its total less one, and the stretch's end tells
    /// the rest (vLLM's hybrid manager releases a window's passed blocks in `allocate_slots`,
    /// from the count the step before left); `false` where a step's end does more (SGLang's
    /// tree inserts).
    fn computed_is_a_count(&self) -> bool {
        false
    }

    /// The request finished: its KV becomes reusable as the engine allows; pins are released.
    fn finish(&mut self, req: ReqId);

    /// The request is preempted: its slots are freed the engine's way.
    fn preempt(&mut self, req: ReqId);

    /// Publishes what request `req` has computed so far (SGLang `checkpoint_kv_cache`).
    fn checkpoint(&mut self, _req: ReqId) {}

    /// The last step's bookkeeping is done before a scheduling pass reads the cache.
    fn settle(&mut self) {}

    /// The tokens of a chunk of `n` that running request `req`, knowing `num_tokens` tokens,
    /// may compute in this step: vLLM's prefill split for Mamba groups
    /// (`Scheduler._mamba_block_aligned_split`); `n` for every other cache.
    fn align_chunk(&self, _req: ReqId, _num_tokens: usize, n: usize) -> usize {
        n
    }

    /// A step is about to allocate for request `req` (a decode step, or a prefill chunk), which
    /// holds KV for `kv_tokens` tokens: a window pool frees what slid out of its window (SGLang
    /// `maybe_evict_swa`).
    fn slide_window(&mut self, _req: ReqId, _kv_tokens: usize, _decode: bool) {}

    /// The window pool of a model with sliding-window layers, where the cache has one.
    fn window_usage(&self) -> Option<Usage> {
        None
    }

    /// The recurrent-state pool of a model with linear-attention layers, where the cache has
    /// one, in slots (one a state; `used_tokens` counts the tree's and the requests' slots).
    fn state_usage(&self) -> Option<Usage> {
        None
    }

    /// A scheduler pass's admission loop is over: state slots its matches took for requests it
    /// did not admit go back (SGLang `MambaSlotAllocator.alloc_group_end`, and the free of a
    /// matched request's copy-on-write slot when `add_one_req` refuses it,
    /// `managers/scheduler.py` `_get_new_batch_prefill_raw`, 0.5.23). Under a state pool
    /// [`touch_tiers`](Self::touch_tiers) takes the slot a hit is copied into and
    /// [`admit`](Self::admit) claims it.
    fn end_admission(&mut self) {}

    /// A prefill batch of `reqs` is about to allocate its KV: under a state pool each request
    /// without its state slots gets them, cached states evicted for the shortfall first (SGLang
    /// `alloc_req_slots` → `ensure_mamba_capacity`, `mem_cache/allocation.py`, 0.5.23).
    fn bind_states(&mut self, _reqs: &[ReqId]) {}

    /// Looks the prefix up as a scheduler pass does (SGLang `match_prefix` on a waiting request:
    /// refreshes recency, splits a partly matched node); pins nothing. Returns the hit and how
    /// many of its tokens are evictable now: what pinning the match would take out of the
    /// evictable budget (SGLang `PrefillAdder._lock_node`). The default only peeks.
    fn touch(&mut self, seq: SeqId, known: usize) -> (usize, u64) {
        (self.peek(seq, known), 0)
    }

    /// [`touch`](Self::touch) that also says how many tokens past the hit the cache's host tier
    /// holds on the host alone (SGLang HiCache's `host_hit_length`); 0 without one. The
    /// scheduler's admission match: under a state pool a hit also takes the slot its state is
    /// copied into ([`end_admission`](Self::end_admission)).
    fn touch_tiers(&mut self, seq: SeqId, known: usize) -> Touched {
        let (hit, pinned) = self.touch(seq, known);
        Touched { hit, pinned, host: 0, window_pinned: 0 }
    }

    /// Puts a host tier under the cache ([`hicache`]); false for a cache that takes none.
    /// Called once, before the first request.
    fn attach_host_tier(&mut self, _cfg: hicache::HostTierConfig) -> bool {
        false
    }

    /// A scheduler step starts at `now`: the host tier submits and acknowledges its copies.
    fn host_events(&mut self, _now: f64) {}

    /// Puts a storage tier under the host tier ([`storage`]); false for a cache without a host
    /// tier. Called once, after [`attach_host_tier`](Self::attach_host_tier).
    fn attach_storage(&mut self, _cfg: storage::StorageConfig) -> bool {
        false
    }

    /// Whether a storage tier is attached.
    fn has_storage(&self) -> bool {
        false
    }

    /// A scheduler pass starts at `now`: the storage tier's I/O done by now lands (the I/O
    /// point after the last step).
    fn storage_begin_pass(&mut self, _now: f64) {}

    /// Request `req` of known tokens `seq[..known]` joins the waiting queue (or its paced retry
    /// is due, with its known hit end): the storage tier's lookup past its match.
    fn storage_lookup(&mut self, _req: ReqId, _seq: SeqId, _known: usize, _now: f64, _hit_end: Option<usize>) {}

    /// Whether waiting request `req`'s storage lookup lets it be admitted now (the prefetch
    /// policy's `check_prefetch_progress`); true without a storage tier.
    fn storage_ready(&mut self, _req: ReqId, _now: f64) -> bool {
        true
    }

    /// The waiting requests (`waiting`, head first) whose paced storage retry is due, in order.
    fn storage_due_retries(&mut self, _waiting: &[ReqId], _out: &mut Vec<(ReqId, Option<usize>)>) {}

    /// Whether waiting request `req`, now matching `matched` tokens, lost part of the match its
    /// last lookup saw and should look up again.
    fn storage_hit_lost(&mut self, _req: ReqId, _matched: usize) -> bool {
        false
    }

    /// Request `req` was admitted (its storage wait ends; a paced retry it still has stays,
    /// out of the queue's reach, as SGLang leaves it).
    fn storage_admitted(&mut self, _req: ReqId) {}

    /// Request `req` left the waiting queue aborted: its storage lookup and retry end.
    fn storage_dropped(&mut self, _req: ReqId) {}

    /// Swaps the storage tier's store with `store` (a store shared by the instances of a run is
    /// lent to each for its scheduler pass); whether there is a tier to swap with.
    fn storage_swap(&mut self, _store: &mut storage::Store) -> bool {
        false
    }

    /// Request `req` was retracted to the queue (its storage retry counters start again).
    fn storage_requeued(&mut self, _req: ReqId) {}

    /// The host tier's copies for the step just formed, reset: (seconds of loads the forward
    /// waits on layer by layer, seconds of blocking writes before it).
    fn take_host_copies(&mut self) -> (f64, f64) {
        (0.0, 0.0)
    }

    /// When the host tier next needs a scheduler step to move on while the engine has nothing
    /// to run — copies queued or loads to acknowledge (at once: 0), else the end of the first
    /// write in flight — or `None`.
    fn next_copy_end(&self) -> Option<f64> {
        None
    }

    /// Tokens the host tier holds now, for a cache with one.
    fn host_tokens(&self) -> Option<u64> {
        None
    }

    /// The host tier's figures, for a cache with one.
    fn host_tier_stats(&self) -> Option<hicache::HostTierStats> {
        None
    }

    /// Refreshes the recency of the cached prefix of all of `seq[..len]` (page-aligned; the last
    /// token included), splitting a partly matched node, pinning nothing (SGLang
    /// `RadixCache.touch_prefix`, `mem_cache/radix_cache.py`, 0.5.23; and `match_prefix` on a
    /// key without a length cap, as `SchedulePolicy._compute_prefix_matches` matches). Returns
    /// the matched length. The default touches nothing and reports no match.
    fn touch_prefix(&mut self, _seq: SeqId, _len: usize) -> usize {
        0
    }

    /// [`touch_prefix`](Self::touch_prefix) that also says how many tokens past the device's
    /// match the host tier holds alone: (device, host). The default has no host tier.
    fn touch_prefix_tiers(&mut self, seq: SeqId, len: usize) -> (usize, usize) {
        (self.touch_prefix(seq, len), 0)
    }

    /// Evicts, the engine's way, towards `tokens` free slots; whether that many are free now.
    /// The default evicts nothing and answers whether eviction could make the room.
    fn ensure_free(&mut self, tokens: u64) -> bool {
        let u = self.usage();
        u.capacity_tokens.is_none_or(|c| c - u.used_tokens + u.evictable_tokens >= tokens)
    }

    /// Memory held now.
    fn usage(&self) -> Usage;

    /// Counters so far.
    fn stats(&self) -> CacheStats;

    /// Checks internal invariants (conservation, pins); panics with a message when broken.
    /// Cheap enough for tests, not for hot loops.
    fn check_invariants(&self);
}

/// Per-request state of a cache, by request id: the live requests' states side by side, and
/// one word per request id saying where its state is. Ids are workload indices, so the words
/// grow with the trace (4 bytes an id) but the states only with what the cache holds: each
/// instance of a fleet sees a share of the ids, and a state per id of the whole trace cost each
/// one tens of megabytes on a day's trace.
#[derive(Debug)]
pub struct ReqSlots<T> {
    /// Per request id: 1 + the place of its state in `live`, 0 for none.
    at: Vec<u32>,
    /// Each live request's id and state.
    live: Vec<(ReqId, T)>,
}

impl<T> Default for ReqSlots<T> {
    fn default() -> Self {
        Self { at: Vec::new(), live: Vec::new() }
    }
}

impl<T> ReqSlots<T> {
    /// The place of `req`'s state, if it has one.
    #[inline]
    fn place(&self, req: ReqId) -> Option<usize> {
        match self.at.get(req as usize) {
            Some(&p) if p > 0 => Some(p as usize - 1),
            _ => None,
        }
    }
    /// Takes the state of an admitted request out (put it back with [`put`](Self::put)).
    pub fn take(&mut self, req: ReqId) -> T {
        self.remove(req).expect("request not admitted")
    }
    /// Takes a request's state out, if it has one (the last state moves to its place).
    pub fn remove(&mut self, req: ReqId) -> Option<T> {
        let i = self.place(req)?;
        self.at[req as usize] = 0;
        let (_, st) = self.live.swap_remove(i);
        if let Some(&(moved, _)) = self.live.get(i) {
            self.at[moved as usize] = i as u32 + 1;
        }
        Some(st)
    }
    /// Stores a request's state.
    pub fn put(&mut self, req: ReqId, st: T) {
        if let Some(i) = self.place(req) {
            self.live[i].1 = st;
            return;
        }
        let r = req as usize;
        if self.at.len() <= r {
            self.at.resize(r + 1, 0);
        }
        self.live.push((req, st));
        self.at[r] = u32::try_from(self.live.len()).expect("fewer live requests than 2^32");
    }
    /// The state of a live request, to change in place.
    #[inline]
    pub fn get_mut(&mut self, req: ReqId) -> Option<&mut T> {
        let i = self.place(req)?;
        Some(&mut self.live[i].1)
    }
    /// The state of a live request.
    #[inline]
    pub fn get(&self, req: ReqId) -> Option<&T> {
        let i = self.place(req)?;
        Some(&self.live[i].1)
    }
    /// Whether the request holds state now.
    pub fn is_live(&self, req: ReqId) -> bool {
        self.place(req).is_some()
    }
    /// Every live request's state (in no particular order).
    pub fn live(&self) -> impl Iterator<Item = &T> {
        self.live.iter().map(|(_, st)| st)
    }
}

/// Token-slot accounting shared by the token-granular caches: capacity, free slots, peak.
#[derive(Debug, Clone, Copy)]
pub struct SlotPool {
    pub capacity: Option<u64>,
    /// Slots held: by requests privately, or by cached entries.
    pub used: u64,
    pub peak: u64,
}

impl SlotPool {
    /// A pool of `capacity` slots (`None` = unlimited).
    pub fn new(capacity: Option<u64>) -> Self {
        Self { capacity, used: 0, peak: 0 }
    }
    /// Free slots (`u64::MAX` when unlimited).
    pub fn available(&self) -> u64 {
        self.capacity.map_or(u64::MAX, |c| c - self.used)
    }
    /// Takes `n` slots; the caller has checked [`available`](Self::available).
    pub fn take(&mut self, n: u64) {
        debug_assert!(n <= self.available(), "slot pool over-allocated");
        self.used += n;
        self.peak = self.peak.max(self.used);
    }
    /// Returns `n` slots.
    pub fn put(&mut self, n: u64) {
        debug_assert!(n <= self.used, "slot pool freed more than it held");
        self.used -= n;
    }
}

/// No reuse: every request computes its whole prompt; slots are freed at finish.
pub struct NoCache {
    pool: SlotPool,
    /// Tokens each request holds slots for.
    held: Vec<u64>,
    /// Slots are handed out in whole pages of this many (SGLang's paged allocator).
    page: u64,
}

impl NoCache {
    /// A cache that never hits, with `capacity` token slots.
    pub fn new(capacity: Option<u64>) -> Self {
        Self::paged(capacity, 1)
    }

    /// [`new`](Self::new) handing out whole pages of `page` slots, as SGLang's
    /// `PagedTokenToKVPoolAllocator` does with the radix cache off.
    pub fn paged(capacity: Option<u64>, page: u32) -> Self {
        Self { pool: SlotPool::new(capacity), held: Vec::new(), page: page.max(1) as u64 }
    }

    fn slots(&self, tokens: u64) -> u64 {
        tokens.div_ceil(self.page) * self.page
    }

    fn held_mut(&mut self, req: ReqId) -> &mut u64 {
        let i = req as usize;
        if self.held.len() <= i {
            self.held.resize(i + 1, 0);
        }
        &mut self.held[i]
    }
}

impl PrefixCache for NoCache {
    fn spec(&self) -> CacheSpec {
        CacheSpec {
            policy: Policy::None,
            block_size: None,
            page_size: (self.page > 1).then_some(self.page as u32),
            capacity_tokens: self.pool.capacity,
            hybrid: None,
            sglang_pool: None,
        }
    }
    fn peek(&self, _seq: SeqId, _known: usize) -> usize {
        0
    }
    fn admit_reserving(
        &mut self,
        req: ReqId,
        _seq: SeqId,
        known: usize,
        max_new_tokens: usize,
        reserve_tokens: usize,
    ) -> Option<Admitted> {
        let n = known.min(max_new_tokens);
        let slots = self.slots(n as u64);
        if slots.max(reserve_tokens as u64) > self.pool.available() {
            return None;
        }
        self.pool.take(slots);
        *self.held_mut(req) = n as u64;
        Some(Admitted { hit_tokens: 0, allocated_tokens: n })
    }
    fn grow(&mut self, req: ReqId, total_tokens: usize) -> bool {
        let held = *self.held_mut(req);
        let total = (total_tokens as u64).max(held);
        let need = self.slots(total) - self.slots(held);
        if need > self.pool.available() {
            return false;
        }
        self.pool.take(need);
        *self.held_mut(req) = total;
        true
    }
    fn computed(&mut self, _req: ReqId, _computed_tokens: usize) {}
    fn tracks_computed(&self) -> bool {
        false
    }
    fn finish(&mut self, req: ReqId) {
        let h = std::mem::take(self.held_mut(req));
        self.pool.put(self.slots(h));
    }
    fn preempt(&mut self, req: ReqId) {
        self.finish(req);
    }
    fn usage(&self) -> Usage {
        Usage { used_tokens: self.pool.used, evictable_tokens: 0, capacity_tokens: self.pool.capacity }
    }
    fn stats(&self) -> CacheStats {
        CacheStats { peak_used_tokens: self.pool.peak, ..Default::default() }
    }
    fn check_invariants(&self) {
        assert_eq!(self.held.iter().map(|&h| self.slots(h)).sum::<u64>(), self.pool.used, "none: held slots != used");
    }
}

#[cfg(test)]
mod conformance;

#[cfg(test)]
mod hicache_tests;

#[cfg(test)]
mod req_slots_tests {
    use super::ReqSlots;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// The slots hold what a plain map holds after any puts and removals: each request's
        /// own state, found by its id, whatever states moved into the places of removed ones.
        #[test]
        fn slots_hold_what_a_map_holds(ops in prop::collection::vec((any::<bool>(), 0u32..40, any::<u16>()), 1..200)) {
            let (mut slots, mut map) = (ReqSlots::default(), BTreeMap::new());
            for (put, id, v) in ops {
                if put {
                    slots.put(id, v);
                    map.insert(id, v);
                } else {
                    prop_assert_eq!(slots.remove(id), map.remove(&id));
                }
                for id in 0..40 {
                    prop_assert_eq!(slots.get(id), map.get(&id));
                    prop_assert_eq!(slots.is_live(id), map.contains_key(&id));
                }
                let mut live: Vec<u16> = slots.live().copied().collect();
                live.sort_unstable();
                let mut want: Vec<u16> = map.values().copied().collect();
                want.sort_unstable();
                prop_assert_eq!(live, want);
            }
        }
    }
}
