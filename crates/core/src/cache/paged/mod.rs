//! vLLM v1 automatic prefix caching (ENGINE_SPEC §1): a pool of fixed-size blocks with a null
//! block 0; chained hashes over full blocks of prompt and output; lookup limited to
//! `num_tokens − 1` rounded down to whole blocks; a free queue that starts in ascending block id
//! order, hands out its head (evicting a cached block on the spot) and takes released blocks at
//! its tail, a request's last block first — or, under vLLM 0.33's free order, the released blocks
//! without a hash at its front; reference counts; no de-duplication (a hash may map to several
//! blocks; lookup returns the oldest). Blocks are hashed when they are allocated for scheduled
//! tokens, so requests later in the same step can already hit them.
//!
//! How it is kept fast without changing any of that (a literal model of vLLM's pool, with
//! chained hashes, checks it operation by operation in the tests): a block's hash is its dense
//! content id ([`BlockIds`]: equal exactly when the prefixes through the block are equal), so
//! the hash map is a plain vector (of 16-bit block ids when the pool allows); one 16-byte record
//! per block; the free queue is a ring of block ids with tombstones, so popping its head never
//! waits on a block record's link; a remembered answer (a refused or preempted request's last
//! lookup) is re-validated per block without a probe; the one request refused at the queue head
//! is watched, its lookup kept current by cache events.

use super::{Admitted, CacheSpec, CacheStats, Policy, PrefixCache, ReqId, ReqSlots, Usage};
use crate::workload::{BlockIds, SeqId, TokenStore};
use key_index::KeyIndex;
use std::sync::Arc;

const NIL: u32 = u32::MAX;
/// The key of a block that carries no hash.
const NO_KEY: u32 = u32::MAX;
/// "No carrier" in the index (block 0 is the null block, never cached).
const NONE: u32 = 0;

/// A block id as the index stores it. A pool of at most 2^16 blocks (block 0 included) is
/// indexed in 16 bits: the index has an entry per distinct block of the run, so it is most of
/// the run's memory and page faults (the whole Mooncake trace at block 16: 22 MB in 32 bits),
/// and first touching a page costs microseconds.
pub trait IndexWord: Copy + Eq + Send + 'static {
    /// `NONE`, stored.
    const NONE: Self;
    /// Whether the key map is made in chunks as it is written ([`KeyIndex`]): for one instance
    /// of many, which touches a scattered few of the run's keys.
    const SPARSE: bool = false;
    /// Stores block `b` (a block id of the pool).
    fn pack(b: u32) -> Self;
    /// The block id stored.
    fn unpack(self) -> u32;
}

impl IndexWord for u16 {
    const NONE: Self = NONE as u16;
    fn pack(b: u32) -> Self {
        debug_assert!(b <= u16::MAX as u32, "block {b} in a 16-bit index");
        b as u16
    }
    fn unpack(self) -> u32 {
        self as u32
    }
}

/// A 16-bit index word with a key map made in chunks ([`IndexWord::SPARSE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sparse16(u16);

impl IndexWord for Sparse16 {
    const NONE: Self = Sparse16(NONE as u16);
    const SPARSE: bool = true;
    fn pack(b: u32) -> Self {
        Sparse16(u16::pack(b))
    }
    fn unpack(self) -> u32 {
        self.0 as u32
    }
}

impl IndexWord for u32 {
    const NONE: Self = NONE;
    fn pack(b: u32) -> Self {
        b
    }
    fn unpack(self) -> u32 {
        self
    }
}

/// The lookup of the one request whose admission last failed (usually the head of the waiting
/// queue, retried every step), kept up to date by the events that can change it, so a retry
/// costs O(1) instead of a walk over all its cached blocks: a hit block evicted truncates the
/// hits there; a hit block leaving or joining the free queue changes how many hits are
/// evictable; the first missing hash being registered means the hits may grow.
struct Watch {
    req: ReqId,
    seq: SeqId,
    max_blocks: usize,
    hits: Vec<u32>,
    /// Hits in the free queue (they count against free capacity).
    evictable: usize,
    /// Key after the last hit, if the lookup stopped at a miss.
    first_miss: Option<u32>,
    /// Hits were truncated or the first missing hash appeared: look up again from the end.
    dirty: bool,
    /// The generation its hits are stamped with.
    gen: u16,
}

/// `PagedCache::watch_gen` when nothing is watched (no block carries it).
const NO_GEN: u16 = u16::MAX;

struct Parked {
    seq: SeqId,
    hits: Vec<u32>,
}

/// One block's state, in 16 bytes (four to a cache line: the pool's records are what every
/// block operation waits on).
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Blk {
    /// Content id when cached, `NO_KEY` otherwise.
    key: u32,
    /// In use: the reference count (the null block: 0). In the free queue: `IN_QUEUE` | its
    /// ring slot (0 in an unlimited pool, which keeps no ring).
    state: u32,
    /// Next block carrying the same key, in registration order.
    dup_next: u32,
    /// The watch generation that stamped the block: it is among the watched hits when this is
    /// the current watch's (see `PagedCache::watch_gen`), so ending a watch clears nothing.
    watch_gen: u16,
    /// The oldest carrier of its key: the index's answer for it.
    first: bool,
}

const _: () = assert!(std::mem::size_of::<Blk>() == 16);

/// `Blk::state` of a block in the free queue (reference counts stay far below it).
const IN_QUEUE: u32 = 1 << 31;

impl Blk {
    /// In the free queue (no reference).
    fn queued(&self) -> bool {
        self.state & IN_QUEUE != 0
    }

    fn ref_cnt(&self) -> u32 {
        if self.queued() {
            0
        } else {
            self.state
        }
    }
}

const FRESH: Blk = Blk { key: NO_KEY, state: 0, dup_next: NIL, watch_gen: 0, first: false };

/// A free-queue slot whose block left the queue from the middle (a cache hit took it).
const GONE: u32 = u32::MAX;

/// The ring slot recorded for a block on the front stack (ring slots stay below 2^30).
const FRONT_SLOT: u32 = IN_QUEUE - 1;

struct ReqState {
    seq: SeqId,
    /// Block table, in token order.
    blocks: Vec<u32>,
    /// Leading blocks already registered in the index.
    cached_blocks: usize,
    /// Tokens the block table was sized for.
    tokens: usize,
}

/// Emptied block tables kept for reuse at most (admissions between two finishes rarely need
/// more; the rest are dropped).
const SPARE_TABLES: usize = 16;

/// vLLM v1 block pool + prefix cache; `W` is the index's word ([`IndexWord`]).
pub struct PagedCache<W: IndexWord = u32> {
    store: Arc<TokenStore>,
    block: usize,
    /// Blocks including the null block; `None` = unlimited.
    num_blocks: Option<u32>,
    /// Per block, everything a block operation touches, in one cache line.
    blk: Vec<Blk>,
    /// Blocks put at the very front of the free queue (vLLM 0.33's `BlockPool.free_blocks`
    /// prepends released blocks that carry no hash), the head last: the queue is this stack
    /// read from its top, then the never-used blocks, then the ring. Blocks without a hash are
    /// never hits, so none leaves the stack but from its top.
    front: Vec<u32>,
    /// Released blocks without a hash go to the front of the free queue (vLLM PR #42656), not
    /// its tail.
    unhashed_first: bool,
    /// Never-used blocks `fresh_next..num_blocks` sit at the head of the free queue, in order
    /// (behind the front stack).
    fresh_next: u32,
    /// The released part of the free queue: a ring of block ids (a power-of-two number of
    /// slots) holding tickets `head..tail` (wrapping), head first. A block taken from the
    /// middle leaves its slot `GONE` behind, skipped when the head reaches it, so popping
    /// reads the next block id from the ring instead of from the previous block's record.
    /// Unlimited pools never pop a released block (never-used ones are always left), so they
    /// keep no order: their ring stays empty.
    ring: Vec<u32>,
    head: u32,
    tail: u32,
    /// Released blocks in the free queue: in the ring (its slots that are not `GONE`) or on the
    /// front stack.
    list_len: u64,
    /// Content ids of the store's blocks: the keys.
    ids: BlockIds,
    /// Per key, the oldest block carrying it (`NONE` if none): vLLM's hash → block map.
    index: KeyIndex<W>,
    reqs: ReqSlots<ReqState>,
    /// Requests not currently admitted (failed admission, preempted): the hits of their last
    /// lookup, re-validated cheaply on the next try (a block still carrying its key is still
    /// the index's answer).
    parked: ReqSlots<Parked>,
    watch: Option<Watch>,
    /// KV events since they were last taken (`log_kv_events`): (key, stored).
    events: Option<Vec<(u32, bool)>>,
    /// The current watch's generation (`NO_GEN` when none), and the next one to hand out.
    watch_gen: u16,
    next_gen: u16,
    cached_free: u64,
    /// Block tables of finished requests, emptied, kept for the next admissions (a table grows
    /// to hundreds of blocks: reusing one spares its allocations and regrowth).
    spare: Vec<Vec<u32>>,
    stats: CacheStats,
}

impl PagedCache {
    /// A cache of `capacity_tokens / block` usable blocks (plus the null block); unlimited when `None`.
    pub fn new(store: Arc<TokenStore>, block: u32, capacity_tokens: Option<u64>) -> Self {
        Self::build(store, block, num_blocks(block, capacity_tokens), None, true)
    }

    /// A cache of exactly `num_gpu_blocks` blocks, block 0 being the null block (as vLLM).
    pub fn with_blocks(store: Arc<TokenStore>, block: u32, num_gpu_blocks: Option<u32>) -> Self {
        Self::build(store, block, num_gpu_blocks, None, true)
    }
}

/// Blocks of a pool of `capacity_tokens` (the null block included); `None`: unlimited.
fn num_blocks(block: u32, capacity_tokens: Option<u64>) -> Option<u32> {
    capacity_tokens.map(|c| (c / block as u64).min(u32::MAX as u64 - 2) as u32 + 1)
}

/// [`PagedCache::new`] with the narrowest index word the pool allows, for a run that touches
/// only the sequences `seqs` (`None`: any): only their blocks are numbered.
pub fn boxed(
    store: Arc<TokenStore>,
    block: u32,
    capacity_tokens: Option<u64>,
    seqs: Option<&[SeqId]>,
    eager: bool,
) -> Box<dyn PrefixCache> {
    match num_blocks(block, capacity_tokens) {
        // One instance of many touches a scattered few keys: its map is made in chunks.
        Some(n) if n <= 1 << 16 && !eager => {
            Box::new(PagedCache::<Sparse16>::build(store, block, Some(n), seqs, eager))
        }
        Some(n) if n <= 1 << 16 => Box::new(PagedCache::<u16>::build(store, block, Some(n), seqs, eager)),
        n => Box::new(PagedCache::<u32>::build(store, block, n, seqs, eager)),
    }
}

impl<W: IndexWord> PagedCache<W> {
    /// `eager`: write the index now (a run that touches most of it); else leave it to calloc's
    /// lazily zeroed pages (one instance of many, which touches a small part).
    fn build(
        store: Arc<TokenStore>,
        block: u32,
        num_gpu_blocks: Option<u32>,
        seqs: Option<&[SeqId]>,
        eager: bool,
    ) -> Self {
        assert!((1..=crate::workload::tokens::MAX_BLOCK_TOKENS as u32).contains(&block), "block size out of range");
        let ids = match seqs {
            None => BlockIds::new(&store, block as usize),
            Some(s) => BlockIds::of(&store, block as usize, &store.prefix_order_of(s.to_vec())),
        };
        let index = KeyIndex::new(ids.len() as usize, eager);
        Self {
            store,
            block: block as usize,
            num_blocks: num_gpu_blocks,
            blk: vec![FRESH],
            front: Vec::new(),
            unhashed_first: super::CacheRules::NEWEST_VLLM.free_unhashed_first,
            fresh_next: 1,
            // Grown as blocks are released (a pool may be far larger than a run ever fills).
            ring: vec![GONE; num_gpu_blocks.map_or(1, |n| (2 * n as usize).next_power_of_two().min(1 << 12))],
            head: 0,
            tail: 0,
            list_len: 0,
            ids,
            index,
            reqs: ReqSlots::default(),
            parked: ReqSlots::default(),
            watch: None,
            events: None,
            watch_gen: NO_GEN,
            next_gen: 1,
            cached_free: 0,
            spare: Vec::new(),
            stats: CacheStats::default(),
        }
    }

    /// The block table of a live request (for tests).
    pub fn block_table(&self, req: ReqId) -> Option<&[u32]> {
        self.reqs.get(req).map(|r| &r.blocks[..])
    }

    /// Whether a block currently carries a hash (is cached).
    pub fn is_cached(&self, block: u32) -> bool {
        self.blk.get(block as usize).is_some_and(|r| r.key != NO_KEY)
    }

    /// Whether block `b` is the index's answer for `key`: it carries `key` and is the oldest
    /// carrier. Once true, it stays true while the block keeps its key (later carriers queue
    /// behind it), so a remembered answer needs no index probe.
    fn answers(&self, b: u32, key: u32) -> bool {
        self.blk[b as usize].key == key && self.blk[b as usize].first
    }

    /// Hits for `seq[..known]`: leading cached blocks, at most `(known − 1) / B` of them.
    /// `hits` may hold an earlier answer: its prefix still answering its keys is kept, the rest
    /// looked up again. Returns how many hits are free (evictable), counted on the way.
    fn walk(&self, seq: SeqId, known: usize, hits: &mut Vec<u32>) -> usize {
        let max_blocks = known.saturating_sub(1) / self.block;
        let (mut valid, mut free) = (0, 0);
        for (&b, k) in hits.iter().zip(self.ids.ids(seq, 0, max_blocks)) {
            if !self.answers(b, k) {
                break;
            }
            valid += 1;
            free += self.blk[b as usize].queued() as usize;
        }
        hits.truncate(valid);
        free + self.extend_hits(seq, max_blocks, hits)
    }

    /// Continues a lookup after `hits` (all valid) up to `max_blocks` blocks; returns how many
    /// of the added hits are free.
    fn extend_hits(&self, seq: SeqId, max_blocks: usize, hits: &mut Vec<u32>) -> usize {
        let mut free = 0;
        for key in self.ids.ids(seq, hits.len(), max_blocks) {
            // The entry may be stale (see `uncache`): a hit only where the block still answers.
            let b = self.index.get(key).unpack();
            if !self.answers(b, key) {
                break;
            }
            hits.push(b);
            free += self.blk[b as usize].queued() as usize;
        }
        free
    }

    /// Stops watching a request; its hits stay as its parked memo (re-validated on retry).
    fn unwatch(&mut self, w: Watch) {
        if let Some(p) = self.parked.get_mut(w.req) {
            p.hits = w.hits;
        }
    }

    /// Whether `b` is among the watched hits.
    fn is_watched(&self, b: u32) -> bool {
        self.blk[b as usize].watch_gen == self.watch_gen
    }

    /// Marks `b` as a hit of the watch of generation `gen`.
    fn stamp(&mut self, b: u32, gen: u16) {
        self.blk[b as usize].watch_gen = gen;
    }

    /// A generation no block carries.
    fn fresh_gen(&mut self) -> u16 {
        if self.next_gen == NO_GEN {
            for r in &mut self.blk {
                r.watch_gen = 0;
            }
            self.next_gen = 1;
        }
        self.next_gen += 1;
        self.next_gen - 1
    }

    #[inline(never)]
    fn uncache(&mut self, b: u32) {
        if self.is_watched(b) {
            // A watched hit is evicted: the hits end before it.
            let w = self.watch.as_mut().expect("a watched block");
            loop {
                let k = w.hits.pop().expect("a watched block is among the hits");
                let r = &mut self.blk[k as usize];
                w.evictable -= r.queued() as usize;
                r.watch_gen = 0;
                if k == b {
                    break;
                }
            }
            w.dirty = true;
        }
        let (key, next) = (self.blk[b as usize].key, self.blk[b as usize].dup_next);
        if let Some(e) = self.events.as_mut() {
            e.push((key, false));
        }
        if self.blk[b as usize].first {
            // The next duplicate, if any, becomes the answer. With none, the entry is left
            // pointing at `b`, stale: every reader checks that its block still answers the key
            // (`answers`), so an eviction — most of a full pool's allocations — writes nothing
            // to the index, whose entries are scattered over the run's distinct blocks.
            if next != NIL {
                self.blk[next as usize].first = true;
                self.index.set(key, W::pack(next));
            }
        } else {
            let mut p = self.index.get(key).unpack();
            debug_assert_ne!(p, NONE, "a cached block's key is indexed");
            while self.blk[p as usize].dup_next != b {
                p = self.blk[p as usize].dup_next;
            }
            self.blk[p as usize].dup_next = next;
        }
        self.blk[b as usize].dup_next = NIL;
        self.blk[b as usize].first = false;
        self.blk[b as usize].key = NO_KEY;
    }

    fn register(&mut self, b: u32, key: u32) {
        if let Some(w) = self.watch.as_mut() {
            if w.first_miss == Some(key) {
                w.dirty = true;
            }
        }
        if let Some(e) = self.events.as_mut() {
            e.push((key, true));
        }
        register_in(&mut self.blk, &mut self.index, b, key);
    }

    fn note_peak(&mut self) {
        let used = (self.in_use() + self.cached_free) * self.block as u64;
        self.stats.peak_used_tokens = self.stats.peak_used_tokens.max(used);
    }

    /// Registers the full blocks of block table `blocks` (of `seq`) within its first `total`
    /// tokens, the first `cached` being registered already; returns how many are now.
    fn cache_full_blocks(&mut self, seq: SeqId, blocks: &[u32], cached: usize, total: usize) -> usize {
        let full = total / self.block;
        if cached >= full {
            return cached;
        }
        let ids = std::mem::take(&mut self.ids);
        let keys = ids.ids(seq, cached, full);
        let quiet = self.watch.is_none() && self.events.is_none();
        if let Some(index) = self.index.dense_mut().filter(|_| quiet) {
            // No watched lookup to mark and no event to log: the map and the blocks alone.
            register_dense(&mut self.blk, index, &blocks[cached..full], keys);
        } else {
            for (&b, key) in blocks[cached..full].iter().zip(keys) {
                self.register(b, key);
            }
        }
        self.ids = ids;
        full
    }

    /// `grow` when the request needs a new block or fills one (kept out of line, so the
    /// common case stays a few instructions).
    #[inline(never)]
    fn grow_blocks(&mut self, req: ReqId, total_tokens: usize) -> bool {
        let free = self.free_len();
        let st = self.reqs.get_mut(req).expect("request admitted");
        debug_assert!(total_tokens <= self.store.seq_len(st.seq), "scheduling unknown tokens");
        let need = total_tokens.div_ceil(self.block).saturating_sub(st.blocks.len());
        if need as u64 > free {
            return false;
        }
        st.tokens = st.tokens.max(total_tokens);
        let (seq, cached, mut blocks) = (st.seq, st.cached_blocks, std::mem::take(&mut st.blocks));
        self.pop_many(need, &mut blocks);
        let cached = self.cache_full_blocks(seq, &blocks, cached, total_tokens);
        let st = self.reqs.get_mut(req).expect("request admitted");
        (st.blocks, st.cached_blocks) = (blocks, cached);
        self.note_peak();
        true
    }

    /// [`PrefixCache::admit_reserving`], or with `external` tokens past the hit allocated but
    /// not registered ([`PrefixCache::admit_external`]).
    fn admit_with(
        &mut self,
        req: ReqId,
        seq: SeqId,
        known: usize,
        max_new_tokens: usize,
        reserve_tokens: usize,
        external: Option<usize>,
    ) -> Option<Admitted> {
        debug_assert!(!self.reqs.is_live(req), "request admitted twice");
        // Scheduling any token needs a new block (the last known token is never a hit); so
        // does loading one.
        if self.free_len() == 0 && (max_new_tokens > 0 || external.is_some()) {
            return None;
        }
        let mut hits = match self.parked.remove(req) {
            Some(p) if p.seq == seq => p.hits,
            _ => self.spare.pop().unwrap_or_default(),
        };
        let mut st = ReqState { seq, blocks: Vec::new(), cached_blocks: 0, tokens: 0 };
        let max_blocks = known.saturating_sub(1) / self.block;
        let mut evictable;
        // The generation the hits are stamped with, if they are (only once an admission fails).
        let watched;
        self.watch_gen = NO_GEN;
        match self.watch.take() {
            Some(w) if w.req == req && w.seq == seq && w.max_blocks == max_blocks => {
                // Retry of the watched request: its hits are current up to the last event.
                watched = Some(w.gen);
                hits = w.hits;
                evictable = w.evictable;
                if w.dirty {
                    let before = hits.len();
                    evictable += self.extend_hits(seq, max_blocks, &mut hits);
                    for &b in &hits[before..] {
                        self.stamp(b, w.gen);
                    }
                }
            }
            other => {
                if let Some(old) = other {
                    self.unwatch(old);
                }
                watched = None;
                evictable = self.walk(seq, known, &mut hits);
            }
        }
        let hit = hits.len() * self.block;
        let total = match external {
            // The caller's lookup ran on this same state: the hit is the one it extended.
            Some(ext) => hit + ext,
            None => hit + (known - hit).min(max_new_tokens),
        };
        let need = total.div_ceil(self.block) - hits.len();
        // vLLM's `get_num_blocks_to_allocate`: blocks for the reservation (at least what is
        // allocated now) less the hits, plus the hits that are in the free queue.
        let reserve = reserve_tokens.max(total).div_ceil(self.block) - hits.len();
        if (reserve + evictable) as u64 > self.free_len() {
            let first_miss = (hits.len() < max_blocks).then(|| self.ids.id(seq, hits.len()));
            let gen = match watched {
                Some(gen) => gen,
                None => {
                    let gen = self.fresh_gen();
                    for &b in &hits {
                        self.stamp(b, gen);
                    }
                    gen
                }
            };
            self.watch = Some(Watch { req, seq, max_blocks, hits, evictable, first_miss, dirty: false, gen });
            self.watch_gen = gen;
            self.parked.put(req, Parked { seq, hits: Vec::new() });
            return None;
        }
        self.touch_all(&hits);
        st.blocks = hits;
        st.cached_blocks = st.blocks.len();
        self.pop_many(need, &mut st.blocks);
        st.tokens = total;
        // Externally loaded blocks are registered only when the load lands ([`Self::loaded`]).
        let registered = if external.is_some() { hit } else { total };
        st.cached_blocks = self.cache_full_blocks(seq, &st.blocks, st.cached_blocks, registered);
        self.reqs.put(req, st);
        self.note_peak();
        Some(Admitted { hit_tokens: hit, allocated_tokens: total })
    }

    /// Releases the request's blocks, last first; returns its state. Under `unhashed_first`
    /// the blocks past its registered ones (they carry no hash: registration covers a leading
    /// run of the table) go to the queue's front, the others to its tail.
    fn free_request(&mut self, req: ReqId) -> ReqState {
        let st = self.reqs.take(req);
        self.stats.partial_block_waste_tokens += (st.blocks.len() * self.block - st.tokens) as u64;
        let to_tail = if self.unhashed_first && self.num_blocks.is_some() {
            self.release_to_front(&st.blocks[st.cached_blocks..]);
            st.cached_blocks
        } else {
            st.blocks.len()
        };
        self.release_all(st.blocks[..to_tail].iter().rev().copied());
        st
    }
}

impl<W: IndexWord> PrefixCache for PagedCache<W> {
    fn spec(&self) -> CacheSpec {
        CacheSpec {
            policy: Policy::Paged,
            block_size: Some(self.block as u32),
            page_size: None,
            capacity_tokens: self.num_blocks.map(|n| (n as u64 - 1) * self.block as u64),

            hybrid: None,
            sglang_pool: None,
        }
    }

    fn follow(&mut self, rules: &super::CacheRules) {
        debug_assert_eq!(self.list_len, 0, "the free order changed with blocks released");
        self.unhashed_first = rules.free_unhashed_first;
    }

    fn peek(&self, seq: SeqId, known: usize) -> usize {
        // The watched request's sequence (one refused admission, asked about again each step
        // while it waits): its hits are current up to the last event; extend them if a miss
        // may have turned into a hit.
        let max_blocks = known.saturating_sub(1) / self.block;
        if let Some(w) = self.watch.as_ref().filter(|w| w.seq == seq && w.max_blocks == max_blocks) {
            let mut n = w.hits.len();
            if w.dirty {
                n += self
                    .ids
                    .ids(seq, n, max_blocks)
                    .take_while(|&k| self.answers(self.index.get(k).unpack(), k))
                    .count();
            }
            debug_assert_eq!(
                n,
                {
                    let mut h = Vec::new();
                    self.walk(seq, known, &mut h);
                    h.len()
                },
                "watched hits stale"
            );
            return n * self.block;
        }
        let mut hits = Vec::new();
        self.walk(seq, known, &mut hits);
        hits.len() * self.block
    }

    fn admit_reserving(
        &mut self,
        req: ReqId,
        seq: SeqId,
        known: usize,
        max_new_tokens: usize,
        reserve_tokens: usize,
    ) -> Option<Admitted> {
        self.admit_with(req, seq, known, max_new_tokens, reserve_tokens, None)
    }

    fn admit_external(
        &mut self,
        req: ReqId,
        seq: SeqId,
        known: usize,
        external: usize,
        reserve_tokens: usize,
    ) -> Option<Admitted> {
        self.admit_with(req, seq, known, 0, reserve_tokens, Some(external))
    }

    fn loaded(&mut self, req: ReqId, computed_tokens: usize) {
        let st = self.reqs.get_mut(req).expect("request admitted");
        let (seq, cached, blocks) = (st.seq, st.cached_blocks, std::mem::take(&mut st.blocks));
        let cached = self.cache_full_blocks(seq, &blocks, cached, computed_tokens);
        let st = self.reqs.get_mut(req).expect("request admitted");
        (st.blocks, st.cached_blocks) = (blocks, cached);
    }

    fn log_kv_events(&mut self) -> bool {
        self.events.get_or_insert_with(Vec::new);
        true
    }

    fn take_kv_events(&mut self, out: &mut Vec<(u32, bool)>) {
        if let Some(e) = self.events.as_mut() {
            out.append(e);
        }
    }

    fn visit_block_keys(&self, seq: SeqId, from: usize, to: usize, visit: &mut dyn FnMut(u32) -> bool) -> bool {
        for key in self.ids.ids(seq, from, to) {
            if !visit(key) {
                break;
            }
        }
        true
    }

    fn grow_reserving(&mut self, req: ReqId, total_tokens: usize, reserve_tokens: usize) -> bool {
        let held = self.reqs.get(req).expect("request admitted").blocks.len();
        if reserve_tokens.div_ceil(self.block).saturating_sub(held) as u64 > self.free_len() {
            return false;
        }
        self.grow(req, total_tokens)
    }

    fn grow(&mut self, req: ReqId, total_tokens: usize) -> bool {
        let block = self.block;
        let st = self.reqs.get_mut(req).expect("request admitted");
        if total_tokens <= st.blocks.len() * block && total_tokens < (st.cached_blocks + 1) * block {
            // Room in the last block and no block filled: nothing to allocate or register.
            st.tokens = st.tokens.max(total_tokens);
            return true;
        }
        self.grow_blocks(req, total_tokens)
    }

    fn grow_ahead(&mut self, req: ReqId, total_tokens: usize, lookahead: usize) -> bool {
        let want = total_tokens + lookahead;
        let held = self.reqs.get(req).expect("request admitted").blocks.len();
        // (A growth within the blocks held needs no division: most steps' decodes.)
        if want > held * self.block && (want.div_ceil(self.block) - held) as u64 > self.free_len() {
            return false;
        }
        let grown = self.grow(req, total_tokens);
        debug_assert!(grown, "fewer blocks than were checked free");
        if lookahead == 0 {
            return grown; // `grow` sized the table for `want`
        }
        let st = self.reqs.get_mut(req).expect("request admitted");
        let extra = want.div_ceil(self.block).saturating_sub(st.blocks.len());
        st.tokens = st.tokens.max(want);
        if extra > 0 {
            let mut blocks = std::mem::take(&mut st.blocks);
            self.pop_many(extra, &mut blocks);
            self.reqs.get_mut(req).expect("request admitted").blocks = blocks;
            self.note_peak();
        }
        grown
    }

    fn quiet_until(&self, req: ReqId) -> Option<usize> {
        // `grow`'s fast path: room in the last block and no block filled.
        let st = self.reqs.get(req)?;
        Some((st.blocks.len() * self.block).min((st.cached_blocks + 1) * self.block - 1))
    }

    fn grow_quietly(&mut self, reqs: &[(ReqId, usize)], refused: Option<ReqId>) -> bool {
        let mut need = 0;
        for &(req, total) in reqs {
            let Some(st) = self.reqs.get(req) else { return false };
            need += total.div_ceil(self.block).saturating_sub(st.blocks.len());
        }
        let free = self.free_len();
        if need as u64 > free {
            return false; // the step would preempt
        }
        // With no block free after the growth, the refused request is refused again before any
        // lookup (`admit_reserving`'s first check); otherwise its watched lookup answers the
        // retry, and must stay as it is.
        if let Some(head) = refused.filter(|_| free - need as u64 > 0) {
            let Some(w) = self.watch.as_ref().filter(|w| w.req == head && !w.dirty) else { return false };
            if w.evictable > 0 && self.pop_would_evict(need, |b| self.is_watched(b)) {
                return false;
            }
            if let Some(miss) = w.first_miss {
                for &(req, total) in reqs {
                    let st = self.reqs.get(req).expect("checked above");
                    if (st.cached_blocks..total / self.block).any(|p| self.ids.id(st.seq, p) == miss) {
                        return false;
                    }
                }
            }
        }
        for &(req, total) in reqs {
            let grown = self.grow(req, total);
            debug_assert!(grown, "a checked growth failed");
        }
        true
    }

    fn computed(&mut self, _req: ReqId, _computed_tokens: usize) {
        // vLLM registers block hashes at allocation time; nothing happens after the step.
    }

    fn tracks_computed(&self) -> bool {
        false
    }

    fn finish(&mut self, req: ReqId) {
        let mut table = self.free_request(req).blocks;
        if self.spare.len() < SPARE_TABLES {
            table.clear();
            self.spare.push(table);
        }
        self.parked.remove(req);
    }

    fn preempt(&mut self, req: ReqId) {
        // Recompute mode: blocks freed (tail first), still hashed, likely re-hit on resume.
        // The registered part of the block table is remembered as the next lookup's answer: the
        // prefix of it that still answers its keys on resume is a hit without a map probe (the
        // lookup checks, so blocks that are duplicates or get evicted meanwhile drop out there).
        let ReqState { seq, mut blocks, cached_blocks, .. } = self.free_request(req);
        blocks.truncate(cached_blocks);
        self.parked.put(req, Parked { seq, hits: blocks });
    }

    fn usage(&self) -> Usage {
        Usage {
            used_tokens: (self.in_use() + self.cached_free) * self.block as u64,
            evictable_tokens: self.cached_free * self.block as u64,
            capacity_tokens: self.spec().capacity_tokens,
        }
    }

    fn stats(&self) -> CacheStats {
        self.stats
    }

    fn check_invariants(&self) {
        let minted = self.fresh_next as usize;
        let mut refs = vec![0u32; minted];
        for st in self.reqs.live() {
            assert_eq!(st.blocks.len(), st.tokens.div_ceil(self.block), "block table size");
            for &b in &st.blocks {
                refs[b as usize] += 1;
            }
        }
        let ref_cnt: Vec<u32> = self.blk.iter().map(Blk::ref_cnt).collect();
        assert_eq!(refs, ref_cnt, "ref counts != block-table membership");
        let released: Vec<u32> = if self.num_blocks.is_some() {
            self.front.iter().copied().chain(self.released()).collect()
        } else {
            self.free_queue()
        };
        assert_eq!(released.len() as u64, self.list_len, "released blocks in the queue");
        assert!(released.iter().all(|&b| self.blk[b as usize].queued()), "in-use block in the free queue");
        let queued = self.blk.iter().filter(|r| r.queued()).count() as u64;
        assert_eq!(queued, self.list_len, "blocks marked as queued");
        assert!(self.front.iter().all(|&b| self.blk[b as usize].key == NO_KEY), "a hashed block on the front stack");
        assert!(self.unhashed_first || self.front.is_empty(), "a front stack under the tail-only order");
        if self.num_blocks.is_some() {
            for (b, r) in self.blk.iter().enumerate().filter(|(_, r)| r.queued()) {
                let slot = r.state & !IN_QUEUE;
                if slot == FRONT_SLOT {
                    assert!(self.front.contains(&(b as u32)), "block {b} marked as on the front stack");
                } else {
                    assert_eq!(self.ring[slot as usize], b as u32, "ring slot of block {b}");
                }
            }
        }
        let in_use = ref_cnt.iter().filter(|&&r| r > 0).count() as u64;
        assert_eq!(in_use, self.in_use(), "in-use count");
        assert_eq!(in_use + self.list_len, minted as u64 - 1, "blocks not conserved");
        let cached_free = released.iter().filter(|&&b| self.is_cached(b)).count() as u64;
        assert_eq!(cached_free, self.cached_free, "cached free count");
        let heads = self.index.carried().into_iter().map(|(k, b)| (k, b.unpack())).filter(|&(k, b)| self.answers(b, k));
        let mut chained = 0;
        for (h, first) in heads {
            let mut b = first;
            while b != NIL {
                assert_eq!(self.blk[b as usize].key, h, "index chain");
                assert_eq!(self.blk[b as usize].first, b == first, "first-carrier flag");
                chained += 1;
                b = self.blk[b as usize].dup_next;
            }
        }
        assert_eq!(chained, self.blk.iter().filter(|r| r.key != NO_KEY).count(), "cached blocks not indexed");
        let watched = self.watch.as_ref().map_or(&[][..], |w| &w.hits[..]);
        assert_eq!(self.watch.as_ref().map_or(NO_GEN, |w| w.gen), self.watch_gen, "watch generation");
        assert!(self.blk.iter().all(|r| r.watch_gen < self.next_gen), "a generation from the future");
        let stamped = self.blk.iter().filter(|r| r.watch_gen == self.watch_gen).count();
        assert_eq!(stamped, watched.len(), "stray watch stamps");
        for &b in watched {
            assert_eq!(self.blk[b as usize].watch_gen, self.watch_gen, "an unstamped watched hit");
            assert!(self.is_cached(b), "a watched hit was evicted");
        }
        if let Some(w) = &self.watch {
            let evictable = w.hits.iter().filter(|&&b| self.blk[b as usize].queued()).count();
            assert_eq!(w.evictable, evictable, "watched evictable count");
        }
    }
}

mod free_queue;
mod key_index;
#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

/// A key map as [`register_in`] reads and writes it: the index ([`KeyIndex`]), or its dense
/// words as a plain slice.
trait KeyMap<W> {
    fn get(&self, key: u32) -> W;
    fn set(&mut self, key: u32, w: W);
}

impl<W: IndexWord> KeyMap<W> for KeyIndex<W> {
    #[inline]
    fn get(&self, key: u32) -> W {
        KeyIndex::get(self, key)
    }
    #[inline]
    fn set(&mut self, key: u32, w: W) {
        KeyIndex::set(self, key, w)
    }
}

impl<W: IndexWord> KeyMap<W> for [W] {
    #[inline]
    fn get(&self, key: u32) -> W {
        self[key as usize]
    }
    #[inline]
    fn set(&mut self, key: u32, w: W) {
        self[key as usize] = w;
    }
}

/// Block `b` now carries `key`: the map's answer if no block answers the key (its entry is
/// empty or stale), else the last of the key's duplicates.
#[inline(always)]
fn register_in<W: IndexWord, M: KeyMap<W> + ?Sized>(blk: &mut [Blk], index: &mut M, b: u32, key: u32) {
    let mut p = index.get(key).unpack();
    if blk[p as usize].key == key && blk[p as usize].first {
        while blk[p as usize].dup_next != NIL {
            p = blk[p as usize].dup_next;
        }
        blk[p as usize].dup_next = b;
        blk[b as usize].key = key;
    } else {
        index.set(key, W::pack(b));
        (blk[b as usize].key, blk[b as usize].first) = (key, true);
    }
}

/// [`PagedCache::register`] for a run of blocks with no watch and no events, over a dense map
/// (`index`, one word per key): plain slices, so the loop keeps the pool and the map in
/// registers (most of a run's registrations are these).
fn register_dense<W: IndexWord>(blk: &mut [Blk], index: &mut [W], blocks: &[u32], keys: impl Iterator<Item = u32>) {
    for (&b, key) in blocks.iter().zip(keys) {
        register_in(blk, index, b, key);
    }
}
