//! vLLM 0.33's hybrid KV cache manager for models that mix full-attention layers with
//! sliding-window layers (gpt-oss, Gemma 3) or linear-attention layers (Qwen3-Next): one block
//! pool and one free queue shared by several KV cache groups, each with its own block table per
//! request; a prefix hit that every group can serve; sliding-window blocks released as the window
//! passes them, Mamba states as the sequence moves on; and, under the default
//! `prefix_cache_retention_interval` 0, only a few sliding-window blocks or states ever cached. Each rule
//! names its upstream function (files under `vllm/v1/core/`, vLLM 0.33.0); the whole is
//! described in `docs/engines/hybrid-attention.md`.
//!
//! - **Pool** (`block_pool.py`): block 0 is the null block; the free queue starts `1, 2, …`;
//!   allocation pops its head, evicting a cached block's key; a hit takes its block out of the
//!   queue (`touch`); `free_blocks` prepends the released blocks without a hash as one run and
//!   appends the hashed ones. The cache key is (block content, group): groups cache the same
//!   tokens separately, and a lookup answers with the earliest-inserted block of a key.
//! - **Lookup** (`kv_cache_coordinator.py` `HybridKVCacheCoordinator.find_longest_cache_hit`,
//!   one pass for full + sliding): the full-attention hit `L_F` (leading blocks cached in every
//!   full group, at most `(num_tokens − 1) / bs`), then the sliding-window hit within it
//!   (`SlidingWindowManager.find_longest_cache_hit`: the highest `need = ⌈(W − 1) / bs⌉` cached
//!   blocks in a row, else the run from block 0); the hit is the latter. When it is shorter than
//!   `L_F`, `L_F` is the request's shared-prefix junction (`request.shared_prefix_boundary`).
//! - **Allocation** (`kv_cache_manager.py` `allocate_slots`): the admission gate (whole sequence,
//!   a sliding group capped at `max_admission_blocks_per_request`), then
//!   `remove_skipped_blocks` (blocks wholly before `computed − W + 1` released, right to left,
//!   even when the step then fails), the count (`get_num_blocks_to_allocate`: new blocks plus
//!   hits in the free queue), the hits touched, new blocks popped group by group, and full blocks
//!   cached — every full-attention block; a sliding-window block only when
//!   `reachable_block_mask` keeps it (the `need` blocks below the replay boundary `⌊(P − 1) / bs⌋`
//!   and below the junction; periodic tails under a positive interval; all when dense).
//! - **Free** (`SingleTypeKVCacheManager.free`): group by group in group order, each table with
//!   its leading nulls dropped, last block first, one `free_blocks` call per group.
//!
//! - **Mamba groups** (`MambaManager`, align mode; models with linear-attention layers such as
//!   Qwen3-Next): a request's table is indexed by position, block `i` holding the state after
//!   `(i + 1) · bs` tokens, and holds at most a few real blocks — the running state, the previous
//!   step's until the next allocation (`last_state_block_idx`), an internal prefill checkpoint.
//!   A hit is the last boundary within the full-attention hit whose state every Mamba group
//!   caches (`find_longest_cache_hit`, right to left). A state is cached only when a chunk ends
//!   on a kept boundary (`reachable_block_mask`: the replay boundary `⌊(P − 1) / bs⌋ · bs` and
//!   the junction under retention 0), and a state cached in this step serves no other request
//!   before the next (`cached_blocks_this_step`). The prefill split that makes chunks end there
//!   (`Scheduler._mamba_block_aligned_split`) is [`HybridCache::split`].
//!
//! Plain vectors and one hash map; every operation is O(blocks it touches). Checked against
//! golden schedules written by vLLM 0.33.0's own scheduler (`tests/golden/vllm_hybrid`,
//! `tests/golden/vllm_mamba`).

mod free_list;
#[cfg(test)]
mod tests;

use super::{Admitted, CacheSpec, CacheStats, Policy, PrefixCache, ReqId, ReqSlots, Usage};
use crate::workload::{BlockIds, SeqId, TokenStore};
use free_list::FreeList;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::sync::Arc;

/// The null block: a table slot the window has passed.
const NULL: u32 = 0;
/// The key of a block that carries no hash.
const NO_KEY: u32 = u32::MAX;

/// How vLLM groups a hybrid model's layers (`kv_cache_planning.py`
/// `_get_kv_cache_groups_uniform_page_size`) and the rules its sliding groups follow: what a
/// paged cache needs to be vLLM's hybrid manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HybridLayout {
    /// KV cache groups of full-attention layers.
    pub full_groups: u8,
    /// KV cache groups of sliding-window layers.
    pub sliding_groups: u8,
    /// Whether the sliding groups come first in group order (their kind appears first among
    /// the layers: gpt-oss, Gemma 3). Group order decides which group allocates and frees first.
    pub sliding_first: bool,
    /// The sliding window, tokens.
    pub window: u32,
    /// `--prefix-cache-retention-interval`: `Some(0)` (vLLM 0.33's default) keeps only the
    /// sliding blocks a replay or a shared prefix reaches, `Some(n)` also one tail every `n`
    /// tokens, `None` every full sliding block.
    pub retention: Option<u32>,
    /// The admission gate's cap on one sliding group's blocks
    /// (`SlidingWindowSpec.max_admission_blocks_per_request`).
    pub admission_cap_blocks: u32,
    /// KV cache groups of linear-attention (Mamba) layers; a model has sliding or Mamba groups,
    /// never both.
    #[serde(skip_serializing_if = "is_zero")]
    pub mamba_groups: u8,
    /// The rules of the Mamba groups, when there are any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mamba: Option<MambaRules>,
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

/// How vLLM 0.33 runs a model's Mamba groups with prefix caching (`mamba_cache_mode` "align").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MambaRules {
    /// The Mamba groups come first in group order (the model's first layer is linear).
    pub first: bool,
    /// The alignment of the prefill checkpoints the layers export from inside a chunk
    /// (`prefill_checkpoint_alignment`: the block size for FlashInfer's GDN kernel); `None`: they
    /// export none (Triton's GDN kernel) and prefills are split at the last cacheable boundary.
    pub checkpoint_alignment: Option<u32>,
    /// The split's `max_prefill_tokens`: the step's token budget, capped by
    /// `--long-prefill-token-threshold` when set.
    pub max_prefill_tokens: u32,
    /// Prefix caching is on (`mamba_cache_mode` "align"); off ("none"), a request holds one state
    /// block per Mamba group from admission to its end (the Mamba block is `max_model_len`),
    /// nothing is cached and prefills are not split.
    pub prefix_caching: bool,
}

impl HybridLayout {
    /// One line for the config echo: the groups, in group order, and the retention.
    pub fn describe(&self) -> String {
        let plural = |n: u8| if n == 1 { "" } else { "s" };
        let (other, what) = match self.mamba {
            Some(m) if !m.prefix_caching => {
                return format!(
                    "hybrid without prefix caching: {} Mamba group{} (a state block a request) and {} full-attention \
                     group{} sharing the blocks",
                    self.mamba_groups,
                    plural(self.mamba_groups),
                    self.full_groups,
                    plural(self.full_groups)
                )
            }
            Some(m) => (
                format!(
                    "{} Mamba group{} ({})",
                    self.mamba_groups,
                    plural(self.mamba_groups),
                    match m.checkpoint_alignment {
                        Some(_) => "prefill checkpoints inside a chunk",
                        None => "prefills split at the last cacheable boundary",
                    }
                ),
                "states",
            ),
            None => (
                format!(
                    "{} sliding-window group{} of {} tokens",
                    self.sliding_groups,
                    plural(self.sliding_groups),
                    self.window
                ),
                "sliding blocks",
            ),
        };
        let retention = match self.retention {
            None => {
                format!("every {} kept", if self.mamba.is_some() { "state at a chunk's end" } else { "sliding block" })
            }
            Some(0) => format!("{what} kept at replay and shared-prefix points"),
            Some(n) => format!("{what} kept every {n} tokens"),
        };
        if self.full_groups == 0 {
            return format!("one sliding-window group of {} tokens (every layer slides); {retention}", self.window);
        }
        let full = format!("{} full-attention group{}", self.full_groups, plural(self.full_groups));
        let (a, b) = if self.other_first() { (other, full) } else { (full, other) };
        format!("hybrid: {a} + {b} sharing the blocks; {retention}")
    }

    /// Whether blocks are cached for later hits (always, bar Mamba groups with prefix caching
    /// off).
    fn caching(&self) -> bool {
        self.mamba.is_none_or(|m| m.prefix_caching)
    }

    /// Whether the sliding or Mamba groups come before the full-attention ones.
    fn other_first(&self) -> bool {
        self.sliding_first || self.mamba.is_some_and(|m| m.first)
    }

    /// Groups in group order.
    fn kinds(&self) -> Vec<Kind> {
        let other =
            [vec![Kind::Sliding; self.sliding_groups as usize], vec![Kind::Mamba; self.mamba_groups as usize]].concat();
        let full = vec![Kind::Full; self.full_groups as usize];
        if self.other_first() {
            [other, full].concat()
        } else {
            [full, other].concat()
        }
    }
}

/// What a KV cache group's layers keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Full,
    Sliding,
    Mamba,
}

/// One block: its key when cached, its group, its references.
#[derive(Debug, Clone, Copy)]
struct Blk {
    key: u32,
    group: u8,
    ref_cnt: u32,
    /// The next block carrying the same (group, key), in insertion order (`NIL`: none).
    dup_next: u32,
}

/// No next carrier.
const NIL: u32 = u32::MAX;

/// A request's block tables and what the sliding groups need to know about it.
#[derive(Debug, Clone)]
struct ReqState {
    seq: SeqId,
    /// Per group, one slot per block of tokens (`NULL` once the window has passed it).
    tables: Vec<Vec<u32>>,
    /// Per group, the leading slots already offered for caching (`num_cached_block`).
    cached: Vec<usize>,
    /// Tokens the tables were sized for.
    tokens: usize,
    /// Tokens computed so far (`num_computed_tokens`, told at each step's end).
    computed: usize,
    /// The shared-prefix junction found at admission (0: none).
    junction: usize,
    /// Tokens known at admission (`request.num_tokens`: the prompt, and a resumed request's
    /// outputs); the prefill ends at `max(prompt, known − 1)`.
    known: usize,
    /// Mamba groups: the leading slots already passed by `remove_skipped_blocks`
    /// (`_num_retired_blocks`).
    retired: usize,
    /// Mamba groups: the slot of the previous step's state, freed once passed
    /// (`last_state_block_idx`).
    last_state: Option<usize>,
    /// Mamba groups: blocks were allocated once (`_allocated_block_reqs`).
    allocated: bool,
    /// Mamba groups: this allocation exports a prefill checkpoint (`_checkpoints`).
    checkpoint: bool,
}

/// vLLM 0.33's hybrid KV cache manager over full-attention and sliding-window or Mamba groups.
pub struct HybridCache {
    ids: BlockIds,
    block: usize,
    layout: HybridLayout,
    /// Per group in group order: what its layers keep.
    kind: Vec<Kind>,
    /// Blocks a sliding hit needs in a row: `⌈(W − 1) / bs⌉`.
    need: usize,
    /// Blocks including the null block; `None`: unlimited.
    num_blocks: Option<u32>,
    blk: Vec<Blk>,
    free: FreeList,
    /// Per (group, key): the earliest-inserted block carrying it; later carriers follow it
    /// through `Blk::dup_next`.
    index: FxHashMap<u64, u32>,
    reqs: ReqSlots<ReqState>,
    /// Each request's prompt length, from its first admission attempt (a resumed request's
    /// known tokens include its outputs; the replay boundary is the prompt's).
    prompts: ReqSlots<usize>,
    /// Keys of the Mamba states cached in this step (`cached_blocks_this_step`): a request may
    /// not start from one before the next step.
    cached_this_step: Vec<u32>,
    /// Blocks held by requests.
    in_use: u64,
    /// Cached blocks in the free queue.
    cached_free: u64,
    stats: CacheStats,
    /// Buffers reused by `release`, `remove_skipped` and `free_request` (no allocation a step
    /// once warm).
    unkeyed: Vec<u32>,
    out_of_window: Vec<u32>,
    freeing: Vec<u32>,
}

fn index_key(group: usize, key: u32) -> u64 {
    (group as u64) << 32 | key as u64
}

/// The last boundary a prefill of `tokens` tokens can cache a Mamba state at, leaving the last
/// token to compute (`get_mamba_prefill_checkpoint_position`, no EAGLE): `⌊(tokens − 1) / bs⌋ · bs`.
fn checkpoint_position(tokens: usize, block: usize) -> usize {
    tokens.saturating_sub(1) / block * block
}

/// Whether a chunk from `start` to `end` can export the state at `checkpoint` from inside
/// (`is_mamba_prefill_checkpoint_valid`, hash block = block): it starts on a boundary, spans a
/// block past its initial state, and the checkpoint lies a block past its start, inside it, on
/// the layers' `alignment`.
fn checkpoint_valid(start: usize, end: usize, checkpoint: usize, block: usize, alignment: u32) -> bool {
    let initial_col = (start as i64 - 1).div_euclid(block as i64);
    let checkpoint_col = end.div_ceil(block) as i64 - 2;
    start.is_multiple_of(block)
        && checkpoint_col > initial_col
        && start + block <= checkpoint
        && start < checkpoint
        && checkpoint < end
        && (checkpoint - start).is_multiple_of(alignment as usize)
}

impl HybridCache {
    /// A pool of `num_gpu_blocks` blocks (the null block included; `None`: unlimited) of `block`
    /// tokens shared by the groups of `layout`.
    pub fn new(store: Arc<TokenStore>, block: u32, num_gpu_blocks: Option<u32>, layout: HybridLayout) -> Self {
        assert!(block > 0, "a positive block size");
        assert!(layout.sliding_groups == 0 || layout.window > 1, "a window of two tokens at least");
        assert!(
            (layout.sliding_groups > 0) != (layout.mamba_groups > 0)
                && (layout.full_groups > 0 || layout.sliding_groups == 1),
            "a hybrid layout has full groups and one other kind, or one sliding group alone"
        );
        assert_eq!(layout.mamba.is_some(), layout.mamba_groups > 0, "Mamba groups have their rules");
        let mut free = FreeList::new();
        for b in 1..num_gpu_blocks.unwrap_or(1) {
            free.push_back(b);
        }
        let fresh = Blk { key: NO_KEY, group: 0, ref_cnt: 0, dup_next: NIL };
        Self {
            ids: BlockIds::new(&store, block as usize),
            block: block as usize,
            kind: layout.kinds(),
            need: (layout.window as usize).saturating_sub(1).div_ceil(block as usize),
            layout,
            num_blocks: num_gpu_blocks,
            blk: vec![fresh; num_gpu_blocks.unwrap_or(1) as usize],
            free,
            index: FxHashMap::default(),
            reqs: ReqSlots::default(),
            prompts: ReqSlots::default(),
            cached_this_step: Vec::new(),
            in_use: 0,
            cached_free: 0,
            stats: CacheStats::default(),
            unkeyed: Vec::new(),
            out_of_window: Vec::new(),
            freeing: Vec::new(),
        }
    }

    /// The block table of group `g` of a live request (for tests).
    pub fn block_table(&self, req: ReqId, g: usize) -> Option<&[u32]> {
        self.reqs.get(req).map(|r| &r.tables[g][..])
    }

    /// The free queue, head first (for tests).
    pub fn free_queue(&self) -> Vec<u32> {
        self.free.to_vec()
    }

    /// Whether block `b` carries a key.
    pub fn is_cached(&self, b: u32) -> bool {
        self.blk.get(b as usize).is_some_and(|r| r.key != NO_KEY)
    }

    /// Blocks in the free queue (unlimited without a pool size).
    fn free_len(&self) -> i64 {
        match self.num_blocks {
            Some(_) => self.free.len() as i64,
            None => i64::MAX,
        }
    }

    /// Tokens group `g` no longer needs once `computed` are computed (`get_num_skipped_tokens`):
    /// those before a sliding group's window; all but the last for a Mamba group.
    fn skipped(&self, g: usize, computed: usize) -> usize {
        match self.kind[g] {
            Kind::Full => 0,
            Kind::Sliding => (computed + 1).saturating_sub(self.layout.window as usize),
            Kind::Mamba => computed.saturating_sub(1),
        }
    }

    /// The earliest-inserted block carrying (group, key) (`get_one_block`).
    fn cached_block(&self, g: usize, key: u32) -> Option<u32> {
        self.index.get(&index_key(g, key)).copied()
    }

    /// Blocks carrying key `key` in every group of one kind (`get_cached_block`), or `None`.
    fn hit_in_kind(&self, kind: Kind, key: u32, out: &mut Vec<u32>) -> bool {
        out.clear();
        for g in (0..self.kind.len()).filter(|&g| self.kind[g] == kind) {
            match self.cached_block(g, key) {
                Some(b) => out.push(b),
                None => return false,
            }
        }
        true
    }

    /// The longest hit for `seq[..known]`: (hit tokens, per-group hit slots, junction).
    fn lookup(&self, seq: SeqId, known: usize) -> (usize, Vec<Vec<u32>>, usize) {
        let groups = self.kind.len();
        let mut hits = vec![Vec::new(); groups];
        if !self.layout.caching() {
            return (0, hits, 0);
        }
        let max_blocks = known.saturating_sub(1) / self.block;
        // Full attention: leading blocks cached in every full group.
        let mut found = Vec::new();
        let mut full = 0;
        for key in self.ids.ids(seq, 0, max_blocks) {
            if !self.hit_in_kind(Kind::Full, key, &mut found) {
                break;
            }
            let mut it = found.iter();
            for (g, h) in hits.iter_mut().enumerate() {
                if self.kind[g] == Kind::Full {
                    h.push(*it.next().expect("a block per full group"));
                }
            }
            full += 1;
        }
        let keys: Vec<u32> = self.ids.ids(seq, 0, full).collect();
        if self.layout.mamba.is_some() {
            // Mamba within it: the last boundary whose state every Mamba group caches, one
            // state block behind nulls (`MambaManager.find_longest_cache_hit`).
            let mut end = 0;
            for i in (0..full).rev() {
                if self.hit_in_kind(Kind::Mamba, keys[i], &mut found) {
                    end = i + 1;
                    break;
                }
            }
            let mut it = found.iter();
            for (g, h) in hits.iter_mut().enumerate() {
                if self.kind[g] == Kind::Mamba {
                    if end > 0 {
                        h.resize(end - 1, NULL);
                        h.push(*it.next().expect("a block per Mamba group"));
                    }
                } else {
                    h.truncate(end);
                }
            }
            let hit = end * self.block;
            let junction = if hit < full * self.block { full * self.block } else { 0 };
            return (hit, hits, junction);
        }
        // Sliding window within it: the highest `need` cached blocks in a row, else the run
        // from block 0.
        let mut run = 0;
        // The sliding groups' blocks of the run, one stride of them per block, from the
        // highest block down.
        let stride = self.kind.iter().filter(|&&k| k == Kind::Sliding).count();
        let mut got: Vec<u32> = Vec::new();
        let mut sliding_hit = None;
        for i in (0..full).rev() {
            if self.hit_in_kind(Kind::Sliding, keys[i], &mut found) {
                run += 1;
                got.extend_from_slice(&found);
                if run == self.need {
                    sliding_hit = Some((i, i + self.need));
                    break;
                }
            } else {
                run = 0;
                got.clear();
            }
        }
        let (first, end) = sliding_hit.unwrap_or((0, run));
        if sliding_hit.is_none() {
            // The run that reaches block 0 (possibly empty): the last `run` found, in reverse.
            got.truncate(run * stride);
        }
        // `got` holds blocks end-1 down to first.
        let mut s = 0;
        for (g, h) in hits.iter_mut().enumerate() {
            if self.kind[g] == Kind::Sliding {
                h.resize(first, NULL);
                h.extend(got.chunks_exact(stride).rev().map(|v| v[s]));
                s += 1;
            } else {
                h.truncate(end);
            }
        }
        let hit = end * self.block;
        let junction = if hit < full * self.block { full * self.block } else { 0 };
        (hit, hits, junction)
    }

    /// `get_num_blocks_to_allocate` of group `g` for a request being admitted with hits `hits`
    /// and `computed` tokens; `cap`: the admission gate's sliding cap; `checkpoint`: a Mamba
    /// group's allocation exports a prefill checkpoint. A Mamba group may count fewer than none
    /// (a table longer than the tokens need), as vLLM's sum then does.
    fn to_allocate(&self, g: usize, tokens: usize, hits: &[u32], computed: usize, cap: bool, checkpoint: bool) -> i64 {
        if self.kind[g] == Kind::Mamba {
            return self.mamba_to_allocate(tokens, 0, hits, checkpoint);
        }
        let mut req = tokens.div_ceil(self.block);
        if cap && self.kind[g] == Kind::Sliding {
            req = req.min(self.layout.admission_cap_blocks as usize);
        }
        let sk = self.skipped(g, computed) / self.block;
        let new = req.saturating_sub(sk.max(hits.len()));
        (new + self.evictable(&hits[sk.min(hits.len())..])) as i64
    }

    /// Hit blocks an allocation takes out of the free queue.
    fn evictable(&self, hits: &[u32]) -> usize {
        hits.iter().filter(|&&b| b != NULL && self.blk[b as usize].ref_cnt == 0).count()
    }

    /// `MambaManager.get_num_blocks_to_allocate` in align mode: the blocks past the table and
    /// the hits, at most one state block and a checkpoint's; none at all when the hit's state
    /// was cached in this step (the request waits for the next).
    fn mamba_to_allocate(&self, tokens: usize, have: usize, hits: &[u32], checkpoint: bool) -> i64 {
        if !self.layout.caching() {
            // One block of `max_model_len` tokens holds the state all along.
            return (have == 0) as i64;
        }
        if let Some(&last) = hits.last() {
            if self.cached_this_step.contains(&self.blk[last as usize].key) {
                return i64::MAX / 4;
            }
        }
        let mut new = tokens.div_ceil(self.block) as i64 - hits.len() as i64 - have as i64;
        if new > 0 {
            new = new.min(1 + checkpoint as i64);
        }
        new + self.evictable(hits) as i64
    }

    /// Whether a Mamba allocation for a chunk from `start` to `end` exports a prefill checkpoint
    /// (`MambaManager._needs_internal_checkpoint`): only a chunk reaching `prefill_end`, and only
    /// where the checkpoint's slot is not already a state.
    fn needs_checkpoint(&self, table: &[u32], start: usize, end: usize, prefill_end: usize) -> bool {
        let Some(align) = self.layout.mamba.filter(|m| m.prefix_caching).and_then(|m| m.checkpoint_alignment) else {
            return false;
        };
        if end < prefill_end || !checkpoint_valid(start, end, checkpoint_position(end, self.block), self.block, align) {
            return false;
        }
        let idx = end.div_ceil(self.block) as i64 - 2;
        idx >= 0 && (idx as usize >= table.len() || table[idx as usize] == NULL)
    }

    /// The tokens of a prefill chunk of `n` from `start` that may run now
    /// (`Scheduler._mamba_block_aligned_split`): a chunk that does not finish the prefill ends on
    /// a block boundary; none runs past the last cacheable boundary (unless the layers export it
    /// from inside the chunk) or past the shared-prefix junction, and one starting inside a block
    /// stops at its end. 0: the request waits.
    pub fn split(&self, start: usize, n: usize, prompt: usize, num_tokens: usize, junction: usize) -> usize {
        let Some(rules) = self.layout.mamba.filter(|m| m.prefix_caching) else { return n };
        let prefill_end = prompt.max(num_tokens.saturating_sub(1));
        if start >= prefill_end {
            return n;
        }
        let b = self.block;
        let mut end = start + n;
        let internal = rules.checkpoint_alignment.is_some_and(|a| {
            end >= prefill_end && checkpoint_valid(start, end, checkpoint_position(prefill_end, b), b, a)
        });
        let last_cache = if internal { 0 } else { checkpoint_position(num_tokens, b) };
        if end < prefill_end {
            let aligned = end / b * b;
            if aligned > start || b <= rules.max_prefill_tokens as usize {
                end = aligned;
            }
        }
        let next_boundary = if !start.is_multiple_of(b) && !internal { (start / b + 1) * b } else { 0 };
        // A junction inside a block stops the chunk at the block boundary below it.
        let junction_stop = if start < junction && junction < end { start + (junction - start) / b * b } else { 0 };
        let end = [next_boundary, last_cache, junction_stop]
            .into_iter()
            .filter(|&s| start < s && s < end)
            .min()
            .unwrap_or(end);
        end.saturating_sub(start)
    }

    /// Pops a block off the free queue's head, evicting its key (`get_new_blocks`).
    fn pop(&mut self, g: usize) -> u32 {
        let b = match self.num_blocks {
            Some(_) => {
                debug_assert!(!self.free.is_empty(), "allocation from an empty queue");
                self.free.pop_front().expect("the count was checked")
            }
            None => {
                self.blk.push(Blk { key: NO_KEY, group: 0, ref_cnt: 0, dup_next: NIL });
                self.blk.len() as u32 - 1
            }
        };
        let r = self.blk[b as usize];
        if r.key != NO_KEY {
            self.uncache(b);
            self.cached_free -= 1;
            self.stats.evicted_tokens += self.block as u64;
        }
        self.blk[b as usize] = Blk { key: NO_KEY, group: g as u8, ref_cnt: 1, dup_next: NIL };
        self.in_use += 1;
        b
    }

    fn uncache(&mut self, b: u32) {
        let r = self.blk[b as usize];
        let k = index_key(r.group as usize, r.key);
        let first = *self.index.get(&k).expect("a cached block is indexed");
        if first == b {
            match r.dup_next {
                NIL => self.index.remove(&k),
                next => self.index.insert(k, next),
            };
        } else {
            let mut p = first;
            while self.blk[p as usize].dup_next != b {
                p = self.blk[p as usize].dup_next;
            }
            self.blk[p as usize].dup_next = r.dup_next;
        }
        self.blk[b as usize].key = NO_KEY;
        self.blk[b as usize].dup_next = NIL;
    }

    /// Takes hit blocks (`touch`): out of the free queue when unreferenced, one more reference.
    fn touch(&mut self, blocks: &[u32]) {
        for &b in blocks.iter().filter(|&&b| b != NULL) {
            let r = &mut self.blk[b as usize];
            if r.ref_cnt == 0 {
                if self.num_blocks.is_some() {
                    self.free.remove(b);
                }
                self.in_use += 1;
                self.cached_free -= (r.key != NO_KEY) as u64;
            }
            self.blk[b as usize].ref_cnt += 1;
        }
    }

    /// `free_blocks`: one reference less each; those left unreferenced join the free queue, the
    /// ones without a key at its head as one run in the given order, the others at its tail.
    fn release(&mut self, blocks: &[u32]) {
        let mut first = std::mem::take(&mut self.unkeyed);
        first.clear();
        for &b in blocks.iter().filter(|&&b| b != NULL) {
            let r = &mut self.blk[b as usize];
            r.ref_cnt -= 1;
            if r.ref_cnt > 0 {
                continue;
            }
            self.in_use -= 1;
            if r.key == NO_KEY {
                first.push(b);
            } else {
                self.cached_free += 1;
                if self.num_blocks.is_some() {
                    self.free.push_back(b);
                }
            }
        }
        if self.num_blocks.is_some() {
            self.free.prepend(&first);
        }
        self.unkeyed = first;
    }

    /// `remove_skipped_blocks` for every group: the sliding slots wholly before the window of
    /// `computed` tokens, right to left up to the first null, released in one call per group; a
    /// Mamba group's real slots before the last state, then its previous step's state.
    fn remove_skipped(&mut self, st: &mut ReqState, computed: usize) {
        let mut retired = st.retired;
        for g in 0..st.tables.len() {
            if self.kind[g] == Kind::Mamba {
                retired = self.remove_passed_states(st, g, computed);
                continue;
            }
            let k = (self.skipped(g, computed) / self.block).min(st.tables[g].len());
            let mut out = std::mem::take(&mut self.out_of_window);
            out.clear();
            for i in (0..k).rev() {
                let b = st.tables[g][i];
                if b == NULL {
                    break;
                }
                out.push(b);
                st.tables[g][i] = NULL;
            }
            if !out.is_empty() {
                self.release(&out);
            }
            self.out_of_window = out;
        }
        st.retired = retired;
    }

    /// `MambaManager.remove_skipped_blocks` of group `g`: the real slots in
    /// `[retired, ⌊(computed − 1) / bs⌋)`, right to left past the nulls, in one release; then the
    /// previous step's state once the state has moved past it. Returns the new `retired`.
    fn remove_passed_states(&mut self, st: &mut ReqState, g: usize, computed: usize) -> usize {
        let mut retired = st.retired;
        if !self.layout.caching() {
            // The one block of `max_model_len` tokens is never passed.
            return retired;
        }
        let k = (self.skipped(g, computed) / self.block).min(st.tables[g].len());
        if computed > 1 && retired < k {
            let mut out = std::mem::take(&mut self.out_of_window);
            out.clear();
            for i in (retired..k).rev() {
                let b = st.tables[g][i];
                if b != NULL {
                    out.push(b);
                    st.tables[g][i] = NULL;
                }
            }
            if !out.is_empty() {
                self.release(&out);
            }
            self.out_of_window = out;
            retired = k;
        }
        if let Some(i) = st.last_state {
            if i + 1 < computed.div_ceil(self.block) && st.tables[g][i] != NULL {
                let b = st.tables[g][i];
                st.tables[g][i] = NULL;
                self.release(&[b]);
            }
        }
        retired
    }

    /// Whether group `g` caches block `i` of a request with a `prompt`-token prompt and
    /// junction `junction` (`reachable_block_mask`): every block of a full group; of a sliding
    /// one, the `need` blocks below each reachable boundary, periodic tails under a positive
    /// interval, or all when dense.
    fn keeps(&self, g: usize, i: usize, prompt: usize, junction: usize) -> bool {
        match self.kind[g] {
            Kind::Full => return true,
            Kind::Mamba => return self.keeps_state(i, prompt, junction),
            Kind::Sliding => {}
        }
        let per = match self.layout.retention {
            None => return true,
            Some(0) => None,
            Some(n) => Some(n as usize / self.block),
        };
        if let Some(per) = per {
            if self.need >= per || i % per >= per - self.need {
                return true;
            }
        }
        let tail = |b: usize| {
            let e = b / self.block;
            i < e && i + self.need >= e
        };
        tail(prompt.saturating_sub(1)) || (junction > 0 && tail(junction))
    }

    /// Whether a Mamba group keeps the state ending block `i` (`MambaManager.reachable_block_mask`):
    /// every one when dense; one per interval's segment; the replay boundary's and the
    /// junction's.
    fn keeps_state(&self, i: usize, prompt: usize, junction: usize) -> bool {
        let b = self.block;
        match self.layout.retention {
            None => return true,
            Some(n) if (n as usize) / b <= 1 && n > 0 => return true,
            Some(n) if n > 0 && (i + 1).is_multiple_of(n as usize / b) => return true,
            _ => {}
        }
        // The boundary's state block: the one ending at the boundary floored to a block.
        let ends = |t: usize| t / b > 0 && t / b - 1 == i;
        ends(prompt.saturating_sub(1)) || (junction > 0 && ends(junction))
    }

    /// `cache_blocks` of every group up to `tokens`: slots from each group's first unoffered
    /// one to the last full block, registered unless null or not kept. A Mamba state registered
    /// here is one of this step's (`cached_blocks_this_step`). (A prefill checkpoint's slot lies
    /// among those and is registered by this walk; `_cache_partial_tail_block` then finds it
    /// keyed and does nothing, hash blocks being cache blocks here.)
    fn cache_blocks(&mut self, req: ReqId, st: &mut ReqState, tokens: usize) {
        if !self.layout.caching() {
            return;
        }
        let full = tokens / self.block;
        let prompt = *self.prompts.get(req).expect("a prompt length is known");
        for g in 0..st.tables.len() {
            if st.cached[g] >= full {
                continue;
            }
            for (i, key) in (st.cached[g]..full).zip(self.ids.ids(st.seq, st.cached[g], full)) {
                let b = st.tables[g][i];
                if b == NULL || !self.keeps(g, i, prompt, st.junction) {
                    continue;
                }
                debug_assert_eq!(self.blk[b as usize].key, NO_KEY, "a block cached twice");
                self.blk[b as usize].key = key;
                if self.kind[g] == Kind::Mamba {
                    self.cached_this_step.push(key);
                }
                match self.index.get(&index_key(g, key)) {
                    None => {
                        self.index.insert(index_key(g, key), b);
                    }
                    Some(&first) => {
                        let mut p = first;
                        while self.blk[p as usize].dup_next != NIL {
                            p = self.blk[p as usize].dup_next;
                        }
                        self.blk[p as usize].dup_next = b;
                    }
                }
            }
            st.cached[g] = full;
        }
    }

    /// Appends new blocks to every table up to `tokens`, group by group (`allocate_new_blocks`).
    /// A Mamba table is padded with nulls up to its state's slot (and the checkpoint's, when
    /// this allocation exports one) and remembers its previous state's slot.
    fn allocate(&mut self, st: &mut ReqState, tokens: usize) {
        let want = tokens.div_ceil(self.block);
        let mut last_state = st.last_state;
        for g in 0..st.tables.len() {
            if self.kind[g] == Kind::Mamba {
                let prev = st.tables[g].len();
                if !self.layout.caching() {
                    if prev == 0 {
                        let b = self.pop(g);
                        st.tables[g].push(b);
                    }
                    continue;
                }
                if want <= prev && !st.checkpoint {
                    continue;
                }
                if prev > 0 {
                    last_state = Some(prev - 1);
                }
                let nulls = want.saturating_sub(1 + st.checkpoint as usize);
                if prev + 1 < want && prev < nulls {
                    st.tables[g].resize(nulls, NULL);
                }
                while st.tables[g].len() < want {
                    let b = self.pop(g);
                    st.tables[g].push(b);
                }
                continue;
            }
            let more = want.saturating_sub(st.tables[g].len());
            st.tables[g].reserve(more);
            while st.tables[g].len() < want {
                let b = self.pop(g);
                st.tables[g].push(b);
            }
        }
        if self.layout.mamba.is_some() {
            st.allocated = true;
            st.last_state = last_state;
        }
        st.tokens = st.tokens.max(tokens);
        let used = (self.in_use + self.cached_free) * self.block as u64;
        self.stats.peak_used_tokens = self.stats.peak_used_tokens.max(used);
    }

    /// Whether growing `req` to `total` tokens would release, allocate and cache nothing (the
    /// common decode step: room in every last block, no block filled, the window past no block).
    fn quiet(&self, req: ReqId, total: usize) -> bool {
        let st = self.reqs.get(req).expect("request admitted");
        let (want, full) = (total.div_ceil(self.block), total / self.block);
        (0..st.tables.len()).all(|g| {
            let t = &st.tables[g];
            let k = (self.skipped(g, st.computed) / self.block).min(t.len());
            let quiet = want <= t.len() && full <= st.cached[g];
            match self.kind[g] {
                Kind::Mamba if !self.layout.caching() => !t.is_empty(),
                Kind::Mamba => {
                    let (_, prefill_end) = self.prefill_end(req, st.known.max(total));
                    quiet
                        && !st.checkpoint
                        && t[st.retired.min(k)..k].iter().all(|&b| b == NULL)
                        && st.last_state.is_none_or(|i| t[i] == NULL || i + 1 >= st.computed.div_ceil(self.block))
                        && !self.needs_checkpoint(t, st.computed, total, prefill_end)
                }
                _ => quiet && (k == 0 || t[k - 1] == NULL),
            }
        })
    }

    /// The prompt and the end of the prefill of request `req` knowing `num_tokens` tokens.
    fn prefill_end(&self, req: ReqId, num_tokens: usize) -> (usize, usize) {
        let prompt = *self.prompts.get(req).expect("a prompt length is known");
        (prompt, prompt.max(num_tokens.saturating_sub(1)))
    }

    /// Releases a request's tables group by group (`coordinator.free`).
    fn free_request(&mut self, req: ReqId) {
        let Some(st) = self.reqs.remove(req) else { return };
        // A full group's table spans every block; a sliding group's too, its dropped blocks
        // as nulls (the only group of a model whose every layer slides).
        let spanning = self.kind.iter().position(|&k| k == Kind::Full).unwrap_or(0);
        let blocks_spanned = st.tables[spanning].len();
        self.stats.partial_block_waste_tokens += (blocks_spanned * self.block).saturating_sub(st.tokens) as u64;
        let mut blocks = std::mem::take(&mut self.freeing);
        for t in &st.tables {
            blocks.clear();
            blocks.extend(t.iter().rev().copied().filter(|&b| b != NULL));
            self.release(&blocks);
        }
        self.freeing = blocks;
    }
}

impl PrefixCache for HybridCache {
    fn spec(&self) -> CacheSpec {
        CacheSpec {
            policy: if self.layout.caching() { Policy::Paged } else { Policy::None },
            block_size: Some(self.block as u32),
            page_size: None,
            capacity_tokens: self.num_blocks.map(|n| (n as u64 - 1) * self.block as u64),
            hybrid: Some(self.layout),
            sglang_pool: None,
        }
    }

    fn peek(&self, seq: SeqId, known: usize) -> usize {
        self.lookup(seq, known).0
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
        if self.prompts.get(req).is_none() {
            self.prompts.put(req, known);
        }
        let (hit, hits, junction) = self.lookup(seq, known);
        let (prompt, prefill_end) = self.prefill_end(req, known);
        // Mamba groups: the chunk stops where a state must be cached; none at all, no admission.
        let n = self.split(hit, (known - hit).min(max_new_tokens), prompt, known, junction);
        if n == 0 {
            return None;
        }
        let total = hit + n;
        let groups = self.kind.len();
        let free = self.free_len();
        // The admission gate: blocks for the whole sequence, a sliding group capped, a Mamba
        // group's state (and checkpoint) blocks.
        if reserve_tokens > 0 {
            let checkpoint = self.needs_checkpoint(&[], hit, reserve_tokens, prefill_end);
            let gate: i64 =
                (0..groups).map(|g| self.to_allocate(g, reserve_tokens, &hits[g], hit, true, checkpoint)).sum();
            if gate > free {
                return None;
            }
        }
        let checkpoint = self.needs_checkpoint(&[], hit, total, prefill_end);
        let need: i64 = (0..groups).map(|g| self.to_allocate(g, total, &hits[g], hit, false, checkpoint)).sum();
        if need > free {
            return None;
        }
        let mut st = ReqState {
            seq,
            tables: Vec::with_capacity(groups),
            cached: Vec::with_capacity(groups),
            tokens: 0,
            computed: hit,
            junction,
            known,
            retired: 0,
            last_state: None,
            allocated: false,
            checkpoint,
        };
        // Hits: every group touches first, then any allocates.
        for (g, mut h) in hits.into_iter().enumerate() {
            let k = self.skipped(g, hit) / self.block;
            for slot in h.iter_mut().take(k) {
                *slot = NULL;
            }
            self.touch(&h);
            st.cached.push(h.len());
            st.tables.push(h);
        }
        self.allocate(&mut st, total);
        self.cache_blocks(req, &mut st, total);
        self.reqs.put(req, st);
        Some(Admitted { hit_tokens: hit, allocated_tokens: total })
    }

    fn grow(&mut self, req: ReqId, total_tokens: usize) -> bool {
        if self.quiet(req, total_tokens) {
            let st = self.reqs.get_mut(req).expect("request admitted");
            st.tokens = st.tokens.max(total_tokens);
            return true;
        }
        let mut st = self.reqs.take(req);
        // Released even when the step then fails ("we can do this even if we cannot schedule").
        let computed = st.computed;
        self.remove_skipped(&mut st, computed);
        if let Some(g) = self.kind.iter().position(|&k| k == Kind::Mamba) {
            let (_, prefill_end) = self.prefill_end(req, st.known.max(total_tokens));
            st.checkpoint = self.needs_checkpoint(&st.tables[g], computed, total_tokens, prefill_end);
        }
        let need: i64 = (0..st.tables.len())
            .map(|g| match self.kind[g] {
                Kind::Mamba => self.mamba_to_allocate(total_tokens, st.tables[g].len(), &[], st.checkpoint),
                _ => total_tokens.div_ceil(self.block).saturating_sub(st.tables[g].len()) as i64,
            })
            .sum();
        if need > self.free_len() {
            self.reqs.put(req, st);
            return false;
        }
        self.allocate(&mut st, total_tokens);
        self.cache_blocks(req, &mut st, total_tokens);
        self.reqs.put(req, st);
        true
    }

    fn quiet_until(&self, req: ReqId) -> Option<usize> {
        // A Mamba group's states move with every step: stepped.
        if self.layout.mamba.is_some() {
            return None;
        }
        // `quiet` for a decode growing to t tokens after t − 1 computed: room in every table
        // (t ≤ blocks × bs), no block filled (t < (cached + 1) × bs), and a sliding window
        // past no live block: (t − W) / bs ≤ f, the table's leading nulls, so t < (f + 1) × bs + W.
        let st = self.reqs.get(req)?;
        let mut until = usize::MAX;
        for (g, t) in st.tables.iter().enumerate() {
            until = until.min(t.len() * self.block).min((st.cached[g] + 1) * self.block - 1);
            // The window's passed blocks and a hit's skipped ones are the table's leading nulls.
            let nulls = t.partition_point(|&b| b == NULL);
            if self.kind[g] == Kind::Sliding && nulls < t.len() {
                until = until.min((nulls + 1) * self.block + self.layout.window as usize - 1);
            }
        }
        Some(until)
    }

    fn grow_quietly(&mut self, reqs: &[(ReqId, usize)], refused: Option<ReqId>) -> bool {
        // A refused waiting head retries against the pool every step (its hits, the admission
        // gate's count): no stretch is tried then (`grows_past_refused`), nor with Mamba groups
        // (`quiet_until`).
        debug_assert!(refused.is_none() && self.layout.mamba.is_none(), "a stretch the cache refuses");
        let mut need = 0i64;
        for &(req, total) in reqs {
            let Some(st) = self.reqs.get(req) else { return false };
            need += st.tables.iter().map(|t| total.div_ceil(self.block).saturating_sub(t.len()) as i64).sum::<i64>();
        }
        // Short of blocks before the window's releases, the step may preempt: the scheduler's.
        if need > self.free_len() {
            return false;
        }
        for &(req, total) in reqs {
            // The count the step before left (the stretch tells the cache no step's end).
            self.computed(req, total - 1);
            let grown = self.grow(req, total);
            debug_assert!(grown, "a checked growth failed");
        }
        true
    }

    fn grows_past_refused(&self) -> bool {
        false
    }

    fn computed(&mut self, req: ReqId, computed_tokens: usize) {
        if let Some(st) = self.reqs.get_mut(req) {
            st.computed = computed_tokens;
        }
    }

    fn computed_is_a_count(&self) -> bool {
        // Read only by the next growth (`remove_skipped`) and the Mamba split; Mamba groups are
        // never coalesced (`quiet_until`).
        true
    }

    fn settle(&mut self) {
        // `new_step_starts`: this step's Mamba states may serve requests from now on.
        self.cached_this_step.clear();
    }

    fn align_chunk(&self, req: ReqId, num_tokens: usize, n: usize) -> usize {
        let Some(st) = self.reqs.get(req) else { return n };
        let prompt = *self.prompts.get(req).expect("a prompt length is known");
        self.split(st.computed, n, prompt, num_tokens, st.junction)
    }

    fn finish(&mut self, req: ReqId) {
        self.free_request(req);
        self.prompts.remove(req);
    }

    fn preempt(&mut self, req: ReqId) {
        self.free_request(req);
    }

    fn usage(&self) -> Usage {
        Usage {
            used_tokens: (self.in_use + self.cached_free) * self.block as u64,
            evictable_tokens: self.cached_free * self.block as u64,
            capacity_tokens: self.spec().capacity_tokens,
        }
    }

    fn stats(&self) -> CacheStats {
        self.stats
    }

    fn check_invariants(&self) {
        let mut refs = vec![0u32; self.blk.len()];
        for st in self.reqs.live() {
            for (g, t) in st.tables.iter().enumerate() {
                if self.kind[g] == Kind::Mamba && !self.layout.caching() {
                    assert_eq!(t.len(), 1, "one state block a request without prefix caching");
                } else {
                    assert_eq!(t.len(), st.tokens.div_ceil(self.block), "table size of group {g}");
                }
                let lead = t.iter().take_while(|&&b| b == NULL).count();
                if self.kind[g] == Kind::Mamba {
                    // The state, the previous step's, a checkpoint.
                    assert!(t.iter().filter(|&&b| b != NULL).count() <= 3, "a Mamba table holds at most 3 states");
                } else {
                    assert!(t[lead..].iter().all(|&b| b != NULL), "a null slot after a real one");
                }
                for &b in t[lead..].iter().filter(|&&b| b != NULL) {
                    refs[b as usize] += 1;
                    assert_eq!(self.blk[b as usize].group as usize, g, "block {b} in a table of another group");
                }
            }
        }
        for (b, r) in self.blk.iter().enumerate().skip(1) {
            assert_eq!(refs[b], r.ref_cnt, "references of block {b}");
            if self.num_blocks.is_some() {
                assert_eq!(self.free.contains(b as u32), r.ref_cnt == 0, "block {b} queued iff unreferenced");
            }
        }
        let in_use = self.blk.iter().skip(1).filter(|r| r.ref_cnt > 0).count() as u64;
        assert_eq!(in_use, self.in_use, "blocks in use");
        let cached_free = self.blk.iter().skip(1).filter(|r| r.ref_cnt == 0 && r.key != NO_KEY).count() as u64;
        assert_eq!(cached_free, self.cached_free, "cached free blocks");
        let mut indexed = 0;
        for (&k, &first) in &self.index {
            let mut b = first;
            while b != NIL {
                assert_eq!(index_key(self.blk[b as usize].group as usize, self.blk[b as usize].key), k, "index entry");
                indexed += 1;
                b = self.blk[b as usize].dup_next;
            }
        }
        assert_eq!(indexed, self.blk.iter().filter(|r| r.key != NO_KEY).count(), "cached blocks not indexed");
    }
}
