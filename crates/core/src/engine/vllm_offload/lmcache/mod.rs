//! LMCache's KV connector with its local CPU backend, as vLLM up to 0.22 starts it for
//! `--kv-offloading-backend lmcache` (`vllm/config/vllm.py`
//! `VllmConfig._post_init_kv_transfer_config`: `LMCacheConnectorV1`, `kv_both`, the extra config
//! replaced by `lmcache.local_cpu = True` and `lmcache.max_local_cpu_size` = the size over TP × PP
//! ranks), with LMCache 0.5.6's defaults (`lmcache/v1/config.py`: 256-token chunks, no partial
//! chunk saved, no decode tokens saved, no layerwise pipelining, no asynchronous loading, LRU).
//! Paths below are LMCache's; `ADAPTER` is `integration/vllm/vllm_v1_adapter.py`
//! (`LMCacheConnectorV1Impl`). docs/engines/kv-offloading.md gives each rule with its source.
//!
//! - **Keys**: a chunk is 256 prompt tokens, keyed by its prefix (`v1/token_database.py`
//!   `ChunkedTokenDatabase`: each chunk's hash chains the one before); only full chunks are
//!   looked up or stored. Here a chunk's key is the content key of its last GPU block.
//! - **Lookup** (`ADAPTER.get_num_new_matched_tokens`, `v1/cache_engine.py` `LMCacheEngine.lookup`):
//!   the leading chunks held, stopping at the first miss, over every known token; each hit chunk
//!   is pinned and moved to the most recent end, the first chunk last. The result is kept for the
//!   request until it is admitted (`lookup_cache`, cleared by `update_state_after_alloc`), so a
//!   request passed by is not looked up again. The request loads `hit − GPU hit` tokens, one
//!   fewer when the hit is every known token; none when that is not positive.
//! - **Load** (`ADAPTER.start_load_kv`): synchronous, before the forward of the step that admits
//!   the request — the chunks from the one holding the GPU hit's end to the hit's end are copied
//!   to the GPU, and the request's pins released. The loaded tokens count as computed at once
//!   (`allocate_slots` without `delay_cache_blocks`): its blocks are registered with the step's.
//! - **Save** (`ADAPTER.build_connector_meta`, `ReqMeta.from_request_tracker`, `wait_for_save`):
//!   synchronous, after the forward. A request's tracker starts at its first scheduled step with
//!   the tokens computed by its end and "saved" up to the lookup's hit (not the GPU hit: chunks
//!   only the GPU holds are stored again); each later step adds its scheduled tokens, and the
//!   first later step of exactly one token marks it decoding, after which it saves nothing. A step
//!   that reaches a new chunk boundary saves the full chunks from the saved mark's chunk on. Each
//!   chunk to save takes a slot first (evicting the least recent unpinned chunk; none: the rest of
//!   that request's chunks are not saved) and is copied; a chunk whose key is held already gives
//!   its slot back without refreshing the held one (`LocalCPUBackend.submit_put_task`).
//! - **Recency** (`storage_backend/cache_policy/lru.py`): refreshed only by a lookup hit; a load or
//!   a store of a held key leaves it.
//!
//! Not modelled: the pin timeout (300 s) of a request looked up and never admitted, chunk sizes
//! other than 256 tokens, partial chunks (`save_unfull_chunk`), layerwise and asynchronous modes,
//! the disk and remote backends, and vLLM 0.23 on, where the flag starts `LMCacheMPConnector`
//! against a separate LMCache server whose size the flag does not set.

use super::{OffloadConfig, OffloadStats};
use crate::cache::lru::{LruList, NIL};
use crate::cache::{PrefixCache, ReqId, ReqSlots};
use crate::engine::ReqRt;
use rustc_hash::FxHashMap;

/// LMCache's default `chunk_size`, in tokens.
pub const CHUNK_TOKENS: u32 = 256;

/// LMCache's CPU allocator rounds each allocation up to this many bytes (`ALIGN_BYTES`).
pub const ALIGN_BYTES: u64 = 4096;

/// A request's connector state: its kept lookup and its save tracker (`RequestTracker`).
#[derive(Debug, Clone, Default)]
struct ReqState {
    /// The kept lookup's hit in tokens (`lookup_cache`), until the request is admitted.
    looked_up: Option<u32>,
    /// The hit of its last lookup (`LoadSpec.lmcache_cached_tokens`): where its saves start.
    hit: u32,
    /// Keys its lookup pinned, released when it is next scheduled.
    pinned: Vec<u32>,
    /// Whether its tracker exists (it was scheduled once), the tokens it holds, the saved mark,
    /// and whether it is decoding.
    tracked: Option<u32>,
    saved: u32,
    decoding: bool,
}

/// A slot of the CPU backend: the key it holds and the pins on it.
#[derive(Debug, Clone, Copy)]
struct Slot {
    key: u32,
    pins: u32,
}

/// The LMCache connector of one instance.
#[derive(Debug)]
pub struct Lmcache {
    cfg: OffloadConfig,
    /// GPU blocks per chunk.
    blocks_per_chunk: usize,
    /// Held chunks: key → slot.
    held: FxHashMap<u32, u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Held slots, most recent first.
    lru: LruList,
    reqs: ReqSlots<ReqState>,
    /// Buffers: chunk keys, and the slots a save took.
    keys: Vec<u32>,
    taken: Vec<u32>,
    pub stats: OffloadStats,
}

impl Lmcache {
    /// An empty backend under `cfg` (chunks of a whole number of GPU blocks).
    pub fn new(cfg: OffloadConfig) -> Self {
        let block_size = cfg.block_tokens;
        debug_assert!(cfg.chunk_tokens.is_multiple_of(block_size), "a chunk is whole GPU blocks");
        let n = cfg.chunks as usize;
        Self {
            cfg,
            blocks_per_chunk: (cfg.chunk_tokens / block_size) as usize,
            held: FxHashMap::default(),
            slots: Vec::with_capacity(n.min(1 << 20)),
            free: Vec::new(),
            lru: LruList::new(0),
            reqs: ReqSlots::default(),
            keys: Vec::new(),
            taken: Vec::new(),
            stats: OffloadStats::default(),
        }
    }

    /// The keys of `r`'s full chunks `from..to` into `keys`.
    fn chunk_keys(&self, cache: &dyn PrefixCache, r: &ReqRt, from: usize, to: usize, keys: &mut Vec<u32>) {
        keys.clear();
        let per = self.blocks_per_chunk;
        let mut i = 0;
        let keyed = cache.visit_block_keys(r.seq, from * per, to * per, &mut |k| {
            i += 1;
            if i % per == 0 {
                keys.push(k);
            }
            true
        });
        debug_assert!(keyed, "the paged cache keys its blocks");
    }

    fn state(&mut self, id: ReqId) -> &mut ReqState {
        if !self.reqs.is_live(id) {
            self.reqs.put(id, ReqState::default());
        }
        self.reqs.get_mut(id).expect("just put")
    }

    /// Looks waiting request `id` (nothing computed, GPU hit `gpu_hit` tokens) up: the tokens it
    /// loads past the GPU hit (0: none; it is scheduled as usual).
    pub fn lookup(&mut self, id: ReqId, r: &ReqRt, gpu_hit: usize, cache: &dyn PrefixCache) -> usize {
        let hit = match self.state(id).looked_up {
            Some(h) => h,
            None => {
                let mut keys = std::mem::take(&mut self.keys);
                let last = (r.num_tokens / self.cfg.chunk_tokens) as usize;
                self.chunk_keys(cache, r, 0, last, &mut keys);
                let hits = self.hit_chunks(&mut keys);
                let hit = hits as u32 * self.cfg.chunk_tokens;
                let st = self.state(id);
                st.looked_up = Some(hit);
                st.pinned.extend_from_slice(&keys);
                self.keys = keys;
                hit
            }
        };
        self.state(id).hit = hit;
        let mut need = hit as i64 - gpu_hit as i64;
        if hit == r.num_tokens {
            need -= 1;
        }
        need.max(0) as usize
    }

    /// The leading chunks of `keys` held (`LMCacheEngine.lookup` with `pin`), `keys` cut to
    /// them: each pinned, then moved to the most recent end from the last to the first
    /// (`touch_cache`).
    fn hit_chunks(&mut self, keys: &mut Vec<u32>) -> usize {
        let hits = keys.iter().take_while(|k| self.held.contains_key(k)).count();
        keys.truncate(hits);
        for &k in keys.iter().rev() {
            let s = self.held[&k];
            self.slots[s as usize].pins += 1;
            self.lru.unlink(s);
            self.lru.link_mru(s);
        }
        hits
    }

    /// Waiting request `id` was admitted (`update_state_after_alloc`), loading `external` tokens
    /// past its GPU hit of `gpu_hit` (0: none): the load's seconds, spent before the forward.
    pub fn admitted(&mut self, id: ReqId, gpu_hit: usize, external: usize) -> f64 {
        let chunk = self.cfg.chunk_tokens as usize;
        let st = self.state(id);
        st.looked_up = None;
        if external == 0 {
            return 0.0;
        }
        let hit = st.hit as usize;
        let chunks = hit / chunk - gpu_hit / chunk;
        self.unpin(id);
        let t = self.cfg.copy_s(chunks);
        self.stats.host_hit_tokens += external as u64;
        self.stats.loads += 1;
        self.stats.loaded_chunks += chunks as u64;
        self.stats.load_s += t;
        t
    }

    fn unpin(&mut self, id: ReqId) {
        let Some(st) = self.reqs.get_mut(id) else { return };
        let pinned = std::mem::take(&mut st.pinned);
        for k in &pinned {
            let s = self.held[k];
            self.slots[s as usize].pins -= 1;
        }
        let mut pinned = pinned;
        pinned.clear();
        self.reqs.get_mut(id).expect("live").pinned = pinned;
    }

    /// The step formed schedules `items` (request, tokens), `reqs` as they stand before it
    /// computes: each request's pins released and its new full prompt chunks saved after the
    /// forward (`wait_for_save`, in batch order). Returns the saves' seconds.
    pub fn save(&mut self, items: &[(ReqId, u32)], reqs: &[ReqRt], cache: &dyn PrefixCache) -> f64 {
        let chunk = self.cfg.chunk_tokens;
        let mut chunks = 0;
        for &(id, n) in items {
            let r = &reqs[id as usize];
            let st = self.state(id);
            let tracked = match st.tracked {
                None => {
                    st.saved = st.hit;
                    r.num_computed + n
                }
                Some(t) => {
                    if n == 1 {
                        st.decoding = true;
                    }
                    (t + n).min(r.num_tokens)
                }
            };
            st.tracked = Some(tracked);
            let saved = st.saved;
            let skip = st.decoding || (saved > 0 && tracked < (saved + 1).div_ceil(chunk) * chunk);
            if !skip {
                st.saved = tracked / chunk * chunk;
            }
            self.unpin(id);
            if !skip && tracked / chunk > saved / chunk {
                chunks += self.store(cache, r, (saved / chunk) as usize, (tracked / chunk) as usize);
            }
        }
        let t = self.cfg.copy_s(chunks);
        self.stats.store_s += t;
        t
    }

    /// Saves `r`'s chunks `from..to` (`LMCacheEngine.store`): a slot for each in order, then
    /// the puts. Returns the chunks copied.
    fn store(&mut self, cache: &dyn PrefixCache, r: &ReqRt, from: usize, to: usize) -> usize {
        let mut keys = std::mem::take(&mut self.keys);
        self.chunk_keys(cache, r, from, to, &mut keys);
        let copied = self.store_keys(&keys);
        self.keys = keys;
        copied
    }

    /// Saves the chunks `keys` in order: a slot for each until none can be had, then the puts
    /// (a key held already gives its slot back). Returns the chunks copied.
    fn store_keys(&mut self, keys: &[u32]) -> usize {
        let mut taken = std::mem::take(&mut self.taken);
        taken.clear();
        for _ in keys {
            match self.take_slot() {
                Some(s) => taken.push(s),
                None => {
                    // "Local cpu memory under pressure": the rest are not saved.
                    self.stats.tier.refused_stores += 1;
                    break;
                }
            }
        }
        for (&k, &s) in keys.iter().zip(&taken) {
            if self.held.contains_key(&k) {
                self.free.push(s);
                continue;
            }
            self.slots[s as usize] = Slot { key: k, pins: 0 };
            self.held.insert(k, s);
            self.lru.link_mru(s);
            self.stats.tier.stored_chunks += 1;
        }
        self.stats.tier.peak_chunks = self.stats.tier.peak_chunks.max(self.held.len() as u64);
        let copied = taken.len();
        self.taken = taken;
        copied
    }

    /// A slot for a chunk being saved: a free one, else the least recent unpinned chunk's
    /// (evicted), else none.
    fn take_slot(&mut self) -> Option<u32> {
        if let Some(s) = self.free.pop() {
            return Some(s);
        }
        if (self.slots.len() as u64) < self.cfg.chunks {
            let s = self.slots.len() as u32;
            self.slots.push(Slot { key: 0, pins: 0 });
            self.lru.forget(s);
            return Some(s);
        }
        let mut s = self.lru.lru();
        while s != NIL && self.slots[s as usize].pins > 0 {
            s = self.lru.newer(s);
        }
        if s == NIL {
            return None;
        }
        self.lru.unlink(s);
        self.held.remove(&self.slots[s as usize].key);
        self.stats.tier.evicted_chunks += 1;
        Some(s)
    }

    /// Request `id` finished: its tracker goes (its pins went when it was scheduled).
    pub fn finished(&mut self, id: ReqId) {
        self.unpin(id);
        self.reqs.remove(id);
    }

    /// Chunks held now.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether no chunk is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Checks the backend's bookkeeping; panics when broken (tests).
    pub fn check_invariants(&self) {
        assert!(self.slots.len() as u64 <= self.cfg.chunks, "over capacity");
        assert_eq!(self.held.len() + self.free.len(), self.slots.len(), "a slot lost");
        let mut listed = 0;
        let mut s = self.lru.mru();
        while s != NIL {
            assert_eq!(self.held.get(&self.slots[s as usize].key), Some(&s), "a listed slot not held");
            listed += 1;
            s = self.lru.older(s);
        }
        assert_eq!(listed, self.held.len(), "a held chunk not listed");
    }
}

#[cfg(test)]
mod tests;
