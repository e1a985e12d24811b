//! LMCache's KV connector with its local CPU backend, as vLLM up to 0.22 starts it for
//! `--kv-offloading-backend lmcache` (`vllm/config/vllm.py`
//! `VllmConfig._post_init_kv_transfer_config`: `LMCacheConnectorV1`, `kv_both`, the extra config
//! replaced by `lmcache.local_cpu = True` and `lmcache.max_local_cpu_size` = the size over TP × PP
//! ranks), with LMCache 0.5.6's defaults (`lmcache/v1/config.py`: 256-token chunks unless
//! `--lmcache-chunk-size` says otherwise, no partial chunk saved, no decode tokens saved, no
//! layerwise pipelining, no asynchronous loading, LRU). Paths below are LMCache's; `ADAPTER` is
//! `integration/vllm/vllm_v1_adapter.py` (`LMCacheConnectorV1Impl`).
//! docs/engines/kv-offloading.md gives each rule with its source.
//!
//! - **Keys**: a chunk is 256 prompt tokens (`chunk_size`), keyed by its prefix
//!   (`v1/token_database.py` `ChunkedTokenDatabase`: each chunk's hash chains the one before);
//!   only full chunks are looked up or stored. Here a chunk's key is the content key of its last
//!   GPU block.
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
//! - **Local disk** (`--lmcache-max-local-disk-size`; `storage_backend/local_disk_backend.py`,
//!   `storage_manager.py`): a second backend behind the CPU one, written through — each chunk a
//!   save copies is also written to disk, asynchronously (the save does not wait), one write at a
//!   time at the disk's rate, its CPU copy pinned until the write ends; a chunk the disk holds is
//!   only refreshed, one being written is skipped, and one the disk has no unpinned room for is
//!   not written. A lookup counts the CPU's leading chunks, then the disk's from the first chunk
//!   the CPU lacks; a chunk only the disk holds is read synchronously with the load, before the
//!   copy to the GPU, and put back into the CPU backend.
//! - **Remote server** (`--lmcache-remote-url lm://…`, [`remote`]): behind the CPU and the disk,
//!   written through in the background (each saved chunk put, its CPU copy held until sent); a
//!   lookup asks it from the first chunk the local backends lack, one round trip a chunk, and
//!   blocks the scheduler meanwhile; a chunk only it holds is read with the load and put back
//!   into the CPU backend. Instances of a run with alike chunks share one server.
//!
//! Not modelled: the pin timeout (300 s) of a request looked up and never admitted, partial
//! chunks (`save_unfull_chunk`), layerwise and asynchronous modes, remote backends other than
//! LMCache's own server, and vLLM
//! 0.23 on, where the flag starts `LMCacheMPConnector` against a separate LMCache server whose
//! size the flag does not set.

use super::{DiskConfig, OffloadConfig, OffloadStats};
use crate::cache::{PrefixCache, ReqId, ReqSlots};
use crate::engine::ReqRt;
use backend::Backend;
use remote::{LmServer, Remote};
use rustc_hash::FxHashSet;
use serde::Serialize;
use std::collections::VecDeque;

pub mod backend;
pub mod remote;

/// LMCache's default `chunk_size`, in tokens.
pub const CHUNK_TOKENS: u32 = 256;

/// LMCache's allocator rounds each chunk's bytes up to this many (`ALIGN_BYTES`).
pub const ALIGN_BYTES: u64 = 4096;

/// The local disk backend's figures over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct DiskStats {
    /// Prompt tokens loaded that only the disk held (of the tier's loaded tokens).
    pub hit_tokens: u64,
    /// Chunks read from disk for loads, and the seconds the reads took.
    pub read_chunks: u64,
    pub read_s: f64,
    /// Chunks written, and the seconds the disk spent writing.
    pub written_chunks: u64,
    pub write_s: f64,
    /// Writes not made: no unpinned room on the disk.
    pub skipped_writes: u64,
    pub evicted_chunks: u64,
    pub peak_chunks: u64,
}

impl DiskStats {
    /// Adds another instance's figures (the peak is the largest instance's).
    pub fn merge(&mut self, o: &DiskStats) {
        self.hit_tokens += o.hit_tokens;
        self.read_chunks += o.read_chunks;
        self.read_s += o.read_s;
        self.written_chunks += o.written_chunks;
        self.write_s += o.write_s;
        self.skipped_writes += o.skipped_writes;
        self.evicted_chunks += o.evicted_chunks;
        self.peak_chunks = self.peak_chunks.max(o.peak_chunks);
    }
}

/// A request's connector state: its kept lookup and its save tracker (`RequestTracker`).
#[derive(Debug, Clone, Default)]
struct ReqState {
    /// The kept lookup's hit in tokens (`lookup_cache`), until the request is admitted.
    looked_up: Option<u32>,
    /// The hit of its last lookup (`LoadSpec.lmcache_cached_tokens`): where its saves start.
    hit: u32,
    /// Keys its lookup pinned, in the CPU backend (its leading chunks) and on disk (the rest),
    /// released when it is next scheduled.
    pinned_cpu: Vec<u32>,
    pinned_disk: Vec<u32>,
    /// The looked-up chunks after the local ones, which only the remote server holds (not
    /// pinned: the remote backend ignores pins).
    remote: Vec<u32>,
    /// Whether its tracker exists (it was scheduled once), the tokens it holds, the saved mark,
    /// and whether it is decoding.
    tracked: Option<u32>,
    saved: u32,
    decoding: bool,
}

/// The local disk backend and its writes.
#[derive(Debug)]
struct Disk {
    cfg: DiskConfig,
    store: Backend,
    /// Writes submitted by the step being formed (key, disk slot): they start when it ends.
    unstarted: Vec<(u32, u32)>,
    /// Writes in flight: (end, key, disk slot), in the order they end.
    writing: VecDeque<(f64, u32, u32)>,
    in_flight: FxHashSet<u32>,
    /// When the disk is next free.
    free_at: f64,
    stats: DiskStats,
}

/// The LMCache connector of one instance.
#[derive(Debug)]
pub struct Lmcache {
    cfg: OffloadConfig,
    /// GPU blocks per chunk.
    blocks_per_chunk: usize,
    cpu: Backend,
    disk: Option<Disk>,
    remote: Option<Box<Remote>>,
    /// How far the step being formed has blocked the engine: its lookups' round trips and its
    /// loads run one after another from the time it is formed.
    cursor: f64,
    /// Seconds the last lookup blocked the scheduler ([`Lmcache::take_wait`]).
    wait: f64,
    reqs: ReqSlots<ReqState>,
    /// Buffers: chunk keys, and the slots a save took.
    keys: Vec<u32>,
    taken: Vec<u32>,
    stats: OffloadStats,
}

impl Lmcache {
    /// Empty backends under `cfg` (chunks of a whole number of GPU blocks).
    pub fn new(cfg: OffloadConfig) -> Self {
        let block_size = cfg.block_tokens;
        debug_assert!(cfg.chunk_tokens.is_multiple_of(block_size), "a chunk is whole GPU blocks");
        Self {
            cfg,
            blocks_per_chunk: (cfg.chunk_tokens / block_size) as usize,
            cpu: Backend::new(cfg.chunks),
            disk: cfg.disk.map(|d| Disk {
                cfg: d,
                store: Backend::new(d.chunks),
                unstarted: Vec::new(),
                writing: VecDeque::new(),
                in_flight: FxHashSet::default(),
                free_at: 0.0,
                stats: DiskStats::default(),
            }),
            remote: cfg.remote.map(|r| Box::new(Remote::new(r))),
            cursor: 0.0,
            wait: 0.0,
            reqs: ReqSlots::default(),
            keys: Vec::new(),
            taken: Vec::new(),
            stats: OffloadStats::default(),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> OffloadConfig {
        self.cfg
    }

    /// The figures so far.
    pub fn stats(&self) -> OffloadStats {
        let mut s = self.stats;
        s.tier.evicted_chunks = self.cpu.evicted;
        s.tier.peak_chunks = self.cpu.peak;
        s.disk = self.disk.as_ref().map(|d| DiskStats {
            evicted_chunks: d.store.evicted,
            peak_chunks: d.store.peak,
            ..d.stats
        });
        s.remote = self.remote.as_ref().map(|r| r.stats(self.cfg.chunk_bytes_per_rank));
        s
    }

    /// Swaps the remote server with `server` (one shared by the instances of a run is lent to
    /// each for its scheduler pass); whether there is a remote backend to swap with.
    pub fn server_swap(&mut self, server: &mut LmServer) -> bool {
        match self.remote.as_mut() {
            Some(r) => {
                std::mem::swap(&mut r.server, server);
                true
            }
            None => false,
        }
    }

    /// Where the step formed at `now` has come to: its host work so far runs from `now` (or from
    /// where an earlier step's left the host, if later).
    fn at(&mut self, now: f64) -> f64 {
        self.cursor = self.cursor.max(now);
        self.cursor
    }

    /// The seconds the last lookup blocked the scheduler (its remote round trips, waiting behind
    /// the socket's puts), taken.
    pub fn take_wait(&mut self) -> f64 {
        std::mem::take(&mut self.wait)
    }

    /// The keys of `r`'s full chunks `from..to` into `keys`.
    fn chunk_keys(&self, cache: &dyn PrefixCache, r: &ReqRt, from: usize, to: usize, keys: &mut Vec<u32>) {
        self.chunk_keys_while(cache, r, from, to, keys, |_| true);
    }

    /// [`Self::chunk_keys`] up to the first chunk `keep` refuses.
    fn chunk_keys_while(
        &self,
        cache: &dyn PrefixCache,
        r: &ReqRt,
        from: usize,
        to: usize,
        keys: &mut Vec<u32>,
        mut keep: impl FnMut(u32) -> bool,
    ) {
        keys.clear();
        let per = self.blocks_per_chunk;
        let mut i = 0;
        let keyed = cache.visit_block_keys(r.seq, from * per, to * per, &mut |k| {
            i += 1;
            if i % per != 0 {
                return true;
            }
            let kept = keep(k);
            if kept {
                keys.push(k);
            }
            kept
        });
        debug_assert!(keyed, "the paged cache keys its blocks");
    }

    fn state(&mut self, id: ReqId) -> &mut ReqState {
        if !self.reqs.is_live(id) {
            self.reqs.put(id, ReqState::default());
        }
        self.reqs.get_mut(id).expect("just put")
    }

    /// The disk writes and remote puts ended by `now` land: their chunks readable (on disk),
    /// their CPU copies unpinned.
    fn settle(&mut self, now: f64) {
        if let Some(x) = self.remote.as_mut() {
            let cpu = &mut self.cpu;
            x.settle(now, |k| cpu.unpin(k));
        }
        let Some(d) = self.disk.as_mut() else { return };
        while let Some(&(end, key, slot)) = d.writing.front() {
            if end > now {
                break;
            }
            d.writing.pop_front();
            d.in_flight.remove(&key);
            d.store.put(slot, key);
            self.cpu.unpin(key);
        }
    }

    /// Looks waiting request `id` up at `now` (or takes the lookup it keeps): the tokens of its
    /// leading chunks held.
    pub fn lookup(&mut self, id: ReqId, r: &ReqRt, cache: &dyn PrefixCache, now: f64) -> u32 {
        let hit = match self.state(id).looked_up {
            Some(h) => h,
            None => {
                self.settle(now);
                let mut keys = std::mem::take(&mut self.keys);
                let last = (r.num_tokens / self.cfg.chunk_tokens) as usize;
                // The chunks walked only as far as they are held (`batched_contains`): the CPU's
                // run, then the disk's from the first chunk the CPU lacks, then the remote
                // server's from the first the disk lacks.
                let (cpu, disk, remote) = (&self.cpu, self.disk.as_ref().map(|d| &d.store), self.remote.as_ref());
                let mut tier = 0;
                self.chunk_keys_while(cache, r, 0, last, &mut keys, |k| loop {
                    let held = match tier {
                        0 => cpu.contains(k),
                        1 => disk.is_some_and(|d| d.contains(k)),
                        2 => remote.is_some_and(|x| x.holds(k, now)),
                        _ => return false,
                    };
                    if held {
                        return true;
                    }
                    tier += 1;
                });
                let (on_cpu, on_disk) = self.hit_chunks(&keys);
                let local = on_cpu + on_disk;
                debug_assert!(tier >= 2 || local == keys.len(), "the walk stopped at the first local miss");
                // One `exists` round trip per remote hit, and one for the miss that ended the walk.
                let from = self.at(now);
                if let Some(x) = self.remote.as_mut().filter(|_| tier >= 2) {
                    let calls = (keys.len() - local) as u64 + u64::from(tier > 2);
                    self.cursor = x.exists(from, calls);
                    self.wait = self.cursor - from;
                }
                let hit = keys.len() as u32 * self.cfg.chunk_tokens;
                let st = self.state(id);
                st.looked_up = Some(hit);
                st.pinned_cpu.extend_from_slice(&keys[..on_cpu]);
                st.pinned_disk.extend_from_slice(&keys[on_cpu..local]);
                st.remote.clear();
                st.remote.extend_from_slice(&keys[local..]);
                self.keys = keys;
                hit
            }
        };
        self.state(id).hit = hit;
        hit
    }

    /// The tokens a request of `num_tokens` known tokens with a GPU hit of `gpu_hit` loads for
    /// a lookup hit of `hit` (`get_num_new_matched_tokens`): one fewer when the hit is every
    /// known token; none when that is not past the GPU hit.
    pub fn need(hit: u32, gpu_hit: usize, num_tokens: u32) -> usize {
        let mut need = hit as i64 - gpu_hit as i64;
        if hit == num_tokens {
            need -= 1;
        }
        need.max(0) as usize
    }

    /// The leading chunks of `keys` held (`LMCacheEngine.lookup` with `pin`,
    /// `StorageManager.batched_contains`): the CPU backend's run, then the disk's from the first
    /// chunk the CPU lacks. Each hit is pinned where it was found, then every hit is moved to
    /// the most recent end of each backend holding it, from the last to the first
    /// (`touch_cache`).
    fn hit_chunks(&mut self, keys: &[u32]) -> (usize, usize) {
        let on_cpu = keys.iter().take_while(|&&k| self.cpu.contains(k)).count();
        let on_disk =
            self.disk.as_ref().map_or(0, |d| keys[on_cpu..].iter().take_while(|&&k| d.store.contains(k)).count());
        for &k in &keys[..on_cpu] {
            self.cpu.pin(k);
        }
        let disk = self.disk.as_mut();
        if let Some(d) = disk {
            for &k in &keys[on_cpu..on_cpu + on_disk] {
                d.store.pin(k);
            }
            for &k in keys[..on_cpu + on_disk].iter().rev() {
                if d.store.contains(k) {
                    d.store.touch(k);
                }
            }
        }
        for &k in keys[..on_cpu + on_disk].iter().rev() {
            if self.cpu.contains(k) {
                self.cpu.touch(k);
            }
        }
        (on_cpu, on_disk)
    }

    /// Waiting request `id` was admitted (`update_state_after_alloc`) at `now`, loading
    /// `external` tokens past its GPU hit of `gpu_hit` (0: none): the seconds the load blocks the
    /// step before its forward (`start_load_kv`, from where the step's lookups left the host) —
    /// the chunks only the disk holds read first, then those only the remote server holds (each
    /// a `get`, after the socket's earlier work, and after their `exists` asked again when the
    /// lookup found chunks in more than one place: `get_block_mapping`), both put back into the
    /// CPU backend, then every loaded chunk copied to the GPU.
    pub fn admitted(&mut self, id: ReqId, gpu_hit: usize, external: usize, now: f64) -> f64 {
        let chunk = self.cfg.chunk_tokens as usize;
        let st = self.state(id);
        st.looked_up = None;
        if external == 0 {
            return 0.0;
        }
        let (hit, on_cpu, on_disk) = (st.hit as usize / chunk, st.pinned_cpu.len(), st.pinned_disk.len());
        let first = gpu_hit / chunk;
        // The disk writes and puts done by now free their CPU copies before the reads take slots.
        self.settle(now);
        let start = self.at(now);
        // The seconds are summed part by part (the disk's reads, the remote's wait, the copy).
        let (mut read_s, mut remote_s) = (0.0, 0.0);
        let bytes = self.cfg.chunk_bytes_per_rank;
        if let Some(d) = self.disk.as_mut() {
            let st = self.reqs.get(id).expect("live");
            let from_disk = &st.pinned_disk[first.saturating_sub(on_cpu).min(on_disk)..];
            read_s = from_disk.len() as f64 * bytes as f64 / d.cfg.bytes_per_s;
            d.stats.read_chunks += from_disk.len() as u64;
            d.stats.hit_tokens +=
                Self::tokens_within(gpu_hit..gpu_hit + external, on_cpu * chunk, (on_cpu + on_disk) * chunk);
            d.stats.read_s += read_s;
            for &k in from_disk {
                if let Some(s) = self.cpu.take_slot() {
                    self.cpu.put(s, k);
                }
            }
        }
        if let Some(x) = self.remote.as_mut() {
            let st = self.reqs.get(id).expect("live");
            let from_remote = &st.remote[first.saturating_sub(on_cpu + on_disk)..];
            let n = from_remote.len() as u64;
            let places = usize::from(on_cpu > 0) + usize::from(on_disk > 0) + usize::from(!st.remote.is_empty());
            let from = start + read_s;
            let mut t = from;
            if n > 0 && places > 1 {
                t = x.exists(t, n);
            }
            remote_s = x.get(t, n, bytes) - from;
            x.stats.hit_tokens +=
                Self::tokens_within(gpu_hit..gpu_hit + external, (on_cpu + on_disk) * chunk, hit * chunk);
            for &k in from_remote {
                if let Some(s) = self.cpu.take_slot() {
                    self.cpu.put(s, k);
                }
            }
        }
        let chunks = hit - first;
        self.unpin(id);
        let copy = self.cfg.copy_s(chunks);
        self.stats.host_hit_tokens += external as u64;
        self.stats.loads += 1;
        self.stats.loaded_chunks += chunks as u64;
        self.stats.load_s += copy;
        let secs = read_s + remote_s + copy;
        self.cursor = start + secs;
        secs
    }

    /// The tokens of the load `loaded` (from the GPU hit on) within a tier's chunks, tokens
    /// `from..to`.
    fn tokens_within(loaded: std::ops::Range<usize>, from: usize, to: usize) -> u64 {
        loaded.end.min(to).saturating_sub(loaded.start.max(from)) as u64
    }

    fn unpin(&mut self, id: ReqId) {
        let Some(st) = self.reqs.get_mut(id) else { return };
        if st.pinned_cpu.is_empty() && st.pinned_disk.is_empty() {
            return;
        }
        let (cpu, disk) = (std::mem::take(&mut st.pinned_cpu), std::mem::take(&mut st.pinned_disk));
        for &k in &cpu {
            self.cpu.unpin(k);
        }
        if let Some(d) = self.disk.as_mut() {
            for &k in &disk {
                d.store.unpin(k);
            }
        }
        let st = self.reqs.get_mut(id).expect("live");
        (st.pinned_cpu, st.pinned_disk) = (cpu, disk);
        st.pinned_cpu.clear();
        st.pinned_disk.clear();
    }

    /// The step formed schedules `items` (request, tokens), `reqs` as they stand before it
    /// computes: each request's pins released and its new full prompt chunks saved after the
    /// forward (`wait_for_save`, in batch order). Returns the saves' seconds.
    pub fn save(&mut self, items: &[(ReqId, u32)], reqs: &[ReqRt], cache: &dyn PrefixCache, now: f64) -> f64 {
        self.settle(now);
        let chunk = self.cfg.chunk_tokens;
        let mut chunks = 0;
        for &(id, n) in items {
            let r = &reqs[id as usize];
            if self.state(id).decoding {
                // Saves nothing again; a lookup's pins (it was preempted and looked up again)
                // go as for any request in the batch (`wait_for_save` unpins each).
                self.unpin(id);
                continue;
            }
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

    /// Saves `r`'s chunks `from..to` (`LMCacheEngine.store`). Returns the chunks copied.
    fn store(&mut self, cache: &dyn PrefixCache, r: &ReqRt, from: usize, to: usize) -> usize {
        let mut keys = std::mem::take(&mut self.keys);
        self.chunk_keys(cache, r, from, to, &mut keys);
        let copied = self.store_keys(&keys);
        self.keys = keys;
        copied
    }

    /// Saves the chunks `keys` in order: a CPU slot for each until none can be had, then the
    /// puts (a key held already gives its slot back); the copied ones are written through to
    /// disk when the step ends. Returns the chunks copied.
    fn store_keys(&mut self, keys: &[u32]) -> usize {
        let mut taken = std::mem::take(&mut self.taken);
        taken.clear();
        for _ in keys {
            match self.cpu.take_slot() {
                Some(s) => taken.push(s),
                None => {
                    // "Local cpu memory under pressure": the rest are not saved.
                    self.stats.tier.refused_stores += 1;
                    break;
                }
            }
        }
        for (&k, &s) in keys.iter().zip(&taken) {
            if self.cpu.put(s, k) {
                self.stats.tier.stored_chunks += 1;
            }
        }
        let copied = taken.len();
        self.taken = taken;
        self.write_through(&keys[..copied]);
        if let Some(x) = self.remote.as_mut() {
            // Put to the server in the background (`RemoteBackend.submit_put_task`), the CPU
            // copy held until it is sent.
            for &k in &keys[..copied] {
                x.submit(k);
                self.cpu.pin(k);
            }
        }
        copied
    }

    /// The chunks `keys`, just put in the CPU backend, submitted to disk
    /// (`LocalDiskBackend.submit_put_task`): a chunk the disk holds is moved up, one being
    /// written is skipped, one the disk has no unpinned room for is not written; the others'
    /// CPU copies are pinned until their writes end, which start when the step ends.
    fn write_through(&mut self, keys: &[u32]) {
        let Some(d) = self.disk.as_mut() else { return };
        for &k in keys {
            if d.store.contains(k) {
                d.store.touch(k);
                continue;
            }
            if d.in_flight.contains(&k) {
                continue;
            }
            let Some(slot) = d.store.take_slot() else {
                d.stats.skipped_writes += 1;
                continue;
            };
            d.in_flight.insert(k);
            d.unstarted.push((k, slot));
            self.cpu.pin(k);
        }
    }

    /// The step formed at `now` runs until `end` (`None`: no forward): the disk writes its saves
    /// submitted start then, each after the one before.
    pub fn priced(&mut self, now: f64, end: Option<f64>) {
        let at = end.unwrap_or(now);
        // The writes and puts done by then free their CPU copies; the step's own follow.
        self.settle(at);
        if let Some(x) = self.remote.as_mut() {
            let cpu = &mut self.cpu;
            x.start_puts(at, self.cfg.chunk_bytes_per_rank, |k| cpu.unpin(k));
        }
        if let Some(d) = self.disk.as_mut() {
            let per = self.cfg.chunk_bytes_per_rank as f64 / d.cfg.bytes_per_s;
            for (k, slot) in std::mem::take(&mut d.unstarted) {
                let done = d.free_at.max(at) + per;
                d.free_at = done;
                d.writing.push_back((done, k, slot));
                d.stats.written_chunks += 1;
                d.stats.write_s += per;
            }
        }
        self.settle(at);
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
    }

    /// Request `id` finished: its tracker goes (its pins went when it was scheduled).
    pub fn finished(&mut self, id: ReqId) {
        self.unpin(id);
        self.reqs.remove(id);
    }

    /// Checks the backends' bookkeeping; panics when broken (tests, and every step of a debug
    /// build). Every pin is a lookup's not yet released, a disk write's or a remote put's in
    /// flight.
    pub fn check_invariants(&self) {
        self.cpu.check_invariants(0);
        let lookups: usize = self.reqs.live().map(|st| st.pinned_cpu.len()).sum();
        let writes = self.disk.as_ref().map_or(0, |d| d.writing.len() + d.unstarted.len());
        let puts = self.remote.as_ref().map_or(0, |r| r.puts_pending());
        assert_eq!(self.cpu.pins(), (lookups + writes + puts) as u64, "a CPU pin without its owner");
        if let Some(d) = &self.disk {
            let lookups: usize = self.reqs.live().map(|st| st.pinned_disk.len()).sum();
            assert_eq!(d.store.pins(), lookups as u64, "a disk pin without its owner");
            d.store.check_invariants(d.writing.len() + d.unstarted.len());
            assert_eq!(d.in_flight.len(), d.writing.len() + d.unstarted.len(), "a write not counted");
        }
    }
}

/// The scenarios' configuration (tests): `chunks` CPU chunks of 8 tokens over 4-token blocks,
/// 1 ms to copy one, no disk.
#[cfg(test)]
pub(crate) fn scenario_config(chunks: u64) -> OffloadConfig {
    OffloadConfig {
        backend: super::OffloadBackend::Lmcache,
        size_gib: 1.0,
        chunks,
        chunk_tokens: 8,
        block_tokens: 4,
        chunk_bytes_per_rank: 1000,
        link_bytes_per_s: 1e6,
        disk: None,
        remote: None,
    }
}

#[cfg(test)]
mod tests;
