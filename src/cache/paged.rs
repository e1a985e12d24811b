//! vLLM v1 automatic prefix caching (ENGINE_SPEC §1): a pool of fixed-size blocks with a null
//! block 0; chained hashes over full blocks of prompt and output; lookup limited to
//! `num_tokens − 1` rounded down to whole blocks; a free queue that starts in ascending block id
//! order, hands out its head (evicting a cached block on the spot) and takes released blocks at
//! its tail, a request's last block first; reference counts; no de-duplication (a hash may map
//! to several blocks; lookup returns the oldest). Blocks are hashed when they are allocated for
//! scheduled tokens, so requests later in the same step can already hit them.
//!
//! How it is kept fast without changing any of that (a literal model of vLLM's pool checks it
//! operation by operation in the tests): one 32-byte record per block; blocks that no other
//! sequence can share are indexed by position instead of by hash; a remembered answer (a
//! refused or preempted request's last lookup) is re-validated per block without a probe; the
//! one request refused at the queue head is watched, its lookup kept current by cache events.

use super::{Admitted, CacheSpec, CacheStats, Policy, PrefixCache, ReqId, ReqSlots, Usage};
use crate::workload::tokens::{chain_hash, ROOT_HASH};
use crate::workload::{SeqId, TokenStore};
use rustc_hash::FxHashMap;
use std::sync::Arc;

const NIL: u32 = u32::MAX;
const NO_HASH: u64 = u64::MAX;
/// Marks the key of a private block: `PRIVATE | seq << 32 | block index`. Chained hashes of
/// shareable blocks have this bit cleared, so the two kinds never meet.
const PRIVATE: u64 = 1 << 63;

/// A sequence's private blocks: those past the longest prefix it shares with any other
/// sequence. Only requests on the same sequence can ever look them up, so they are indexed by
/// position (`first[i − from]` = the oldest carrier) instead of by hash, and never hashed.
#[derive(Default)]
struct PrivateIndex {
    /// First private block index.
    from: u32,
    /// Private full blocks of the sequence.
    len: u32,
    /// Oldest carrier per private block; allocated while any is cached.
    first: Vec<u32>,
    /// Entries of `first` that are not `NIL`.
    live: u32,
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
    /// Hits with `ref_cnt == 0` (they count against free capacity).
    evictable: usize,
    /// Hash after the last hit, if the lookup stopped at a miss.
    first_miss: Option<u64>,
    /// Hits were truncated or the first missing hash appeared: look up again from the end.
    dirty: bool,
}

struct Parked {
    seq: SeqId,
    hashes: Vec<u64>,
    hits: Vec<u32>,
}

/// One block's state.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Blk {
    /// Key (chained hash or private key) when cached, `NO_HASH` otherwise.
    hash: u64,
    ref_cnt: u32,
    /// Free-queue neighbours.
    prev: u32,
    next: u32,
    /// Next block carrying the same key, in registration order.
    dup_next: u32,
    /// 1 + the block's position among the watched hits, 0 when not watched.
    watch_pos: u32,
    /// The oldest carrier of its key: the index's answer for it.
    first: bool,
}

const FRESH: Blk = Blk { hash: NO_HASH, ref_cnt: 0, prev: NIL, next: NIL, dup_next: NIL, watch_pos: 0, first: false };

struct ReqState {
    seq: SeqId,
    /// Block table, in token order.
    blocks: Vec<u32>,
    /// Chained hashes of the request's full blocks, computed lazily.
    hashes: Vec<u64>,
    /// Leading blocks already registered in the hash map.
    cached_blocks: usize,
    /// Tokens the block table was sized for.
    tokens: usize,
}

/// vLLM v1 block pool + prefix cache.
pub struct PagedCache {
    store: Arc<TokenStore>,
    block: usize,
    /// Blocks including the null block; `None` = unlimited.
    num_blocks: Option<u32>,
    /// Per block, everything a block operation touches, in one cache line.
    blk: Vec<Blk>,
    /// Never-used blocks `fresh_next..num_blocks` sit at the head of the free queue, in order.
    fresh_next: u32,
    head: u32,
    tail: u32,
    list_len: u64,
    /// Shareable blocks: chained hash → oldest carrier.
    map: FxHashMap<u64, u32>,
    /// Private blocks, per sequence.
    private: Vec<PrivateIndex>,
    reqs: ReqSlots<ReqState>,
    /// Requests not currently admitted (failed admission, preempted): their block hashes, kept
    /// as vLLM keeps `request.block_hashes`, and the hits of their last lookup, re-validated
    /// cheaply on the next try (a block still carrying its hash is still the map's answer).
    parked: FxHashMap<ReqId, Parked>,
    /// Reused buffer for block fingerprints.
    scratch: Vec<u64>,
    watch: Option<Watch>,
    in_use: u64,
    cached_free: u64,
    stats: CacheStats,
}

impl PagedCache {
    /// A cache of `capacity_tokens / block` usable blocks (plus the null block); unlimited when `None`.
    pub fn new(store: Arc<TokenStore>, block: u32, capacity_tokens: Option<u64>) -> Self {
        let num_blocks = capacity_tokens.map(|c| (c / block as u64).min(u32::MAX as u64 - 2) as u32 + 1);
        Self::with_blocks(store, block, num_blocks)
    }

    /// A cache of exactly `num_gpu_blocks` blocks, block 0 being the null block (as vLLM).
    pub fn with_blocks(store: Arc<TokenStore>, block: u32, num_gpu_blocks: Option<u32>) -> Self {
        assert!((1..=crate::workload::tokens::MAX_BLOCK_TOKENS as u32).contains(&block), "block size out of range");
        assert!(store.num_seqs() < (1 << 31), "too many sequences for private block keys");
        let private = (store.shared_prefix_lens().iter().enumerate())
            .map(|(seq, &l)| {
                let (from, full) = (l / block, (store.seq_len(seq as SeqId) / block as usize) as u32);
                PrivateIndex { from, len: full - from, ..Default::default() }
            })
            .collect();
        Self {
            store,
            block: block as usize,
            num_blocks: num_gpu_blocks,
            blk: vec![FRESH],
            fresh_next: 1,
            head: NIL,
            tail: NIL,
            list_len: 0,
            map: FxHashMap::default(),
            private,
            reqs: ReqSlots::default(),
            parked: FxHashMap::default(),
            scratch: Vec::new(),
            watch: None,
            in_use: 0,
            cached_free: 0,
            stats: CacheStats::default(),
        }
    }

    /// Length of the free queue (never-used + released blocks).
    pub fn free_len(&self) -> u64 {
        match self.num_blocks {
            Some(n) => (n - self.fresh_next) as u64 + self.list_len,
            None => u64::MAX,
        }
    }

    /// The free queue, head first (for tests; O(queue)).
    pub fn free_queue(&self) -> Vec<u32> {
        let mut q: Vec<u32> = (self.fresh_next..self.num_blocks.unwrap_or(self.fresh_next)).collect();
        let mut b = self.head;
        while b != NIL {
            q.push(b);
            b = self.blk[b as usize].next;
        }
        q
    }

    /// The block table of a live request (for tests).
    pub fn block_table(&self, req: ReqId) -> Option<&[u32]> {
        self.reqs.get(req).map(|r| &r.blocks[..])
    }

    /// Whether a block currently carries a hash (is cached).
    pub fn is_cached(&self, block: u32) -> bool {
        self.blk.get(block as usize).is_some_and(|r| r.hash != NO_HASH)
    }

    /// Whether block `b` is the map's answer for hash `h`: it carries `h` and is the oldest
    /// carrier. Once true, it stays true while the block keeps its hash (later carriers queue
    /// behind it), so a remembered answer needs no map probe.
    fn answers(&self, b: u32, h: u64) -> bool {
        self.blk[b as usize].hash == h && self.blk[b as usize].first
    }

    /// First private block index of `seq`.
    fn private_from(&self, seq: SeqId) -> usize {
        self.private[seq as usize].from as usize
    }

    /// Key of block `i` of `seq`, whose predecessor's key is `parent`: its chained hash when
    /// shareable, its position when private.
    fn block_key(&self, seq: SeqId, parent: u64, i: usize) -> u64 {
        if i >= self.private_from(seq) {
            private_key(seq, i)
        } else {
            let b = self.block;
            shared_key(parent, self.store.fingerprint(seq, i * b, b), b)
        }
    }

    /// The oldest block carrying `key`.
    fn first_of(&self, key: u64) -> Option<u32> {
        if key & PRIVATE == 0 {
            return self.map.get(&key).copied();
        }
        let (seq, i) = split_private(key);
        let p = &self.private[seq];
        p.first.get(i - p.from as usize).copied().filter(|&b| b != NIL)
    }

    /// Records `b` (or nobody, `NIL`) as the oldest carrier of a private key.
    fn set_private_first(&mut self, key: u64, b: u32) {
        let (seq, i) = split_private(key);
        let p = &mut self.private[seq];
        let j = i - p.from as usize;
        if p.first.is_empty() {
            p.first = vec![NIL; p.len as usize];
        }
        match (p.first[j] == NIL, b == NIL) {
            (true, false) => p.live += 1,
            (false, true) => p.live -= 1,
            _ => {}
        }
        p.first[j] = b;
        if p.live == 0 {
            p.first = Vec::new();
        }
    }

    /// Hits for `seq[..known]`: leading cached blocks, at most `(known − 1) / B` of them.
    /// Hashes computed on the way are appended to `hashes` (which holds a prefix of them).
    /// `hits` may hold an earlier answer: its prefix still answering its hashes is kept, the
    /// rest looked up again.
    fn walk(&self, seq: SeqId, known: usize, hashes: &mut Vec<u64>, hits: &mut Vec<u32>) {
        let max_blocks = known.saturating_sub(1) / self.block;
        let valid = hits.iter().zip(hashes.iter()).take(max_blocks).take_while(|(&b, &h)| self.answers(b, h)).count();
        hits.truncate(valid);
        self.extend_hits(seq, max_blocks, hashes, hits);
    }

    /// Continues a lookup after `hits` (all valid) up to `max_blocks` blocks.
    fn extend_hits(&self, seq: SeqId, max_blocks: usize, hashes: &mut Vec<u64>, hits: &mut Vec<u32>) {
        for i in hits.len()..max_blocks {
            if hashes.len() <= i {
                let parent = if i == 0 { ROOT_HASH } else { hashes[i - 1] };
                hashes.push(self.block_key(seq, parent, i));
            }
            match self.first_of(hashes[i]) {
                Some(blk) => hits.push(blk),
                None => break,
            }
        }
    }

    /// Stops watching a request; its hits stay as its parked memo (re-validated on retry).
    fn unwatch(&mut self, w: Watch) {
        for &b in &w.hits {
            self.blk[b as usize].watch_pos = 0;
        }
        if let Some(p) = self.parked.get_mut(&w.req) {
            p.hits = w.hits;
        }
    }

    fn unlink(&mut self, b: u32) {
        let (p, n) = (self.blk[b as usize].prev, self.blk[b as usize].next);
        if p == NIL {
            self.head = n;
        } else {
            self.blk[p as usize].next = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.blk[n as usize].prev = p;
        }
        self.blk[b as usize].prev = NIL;
        self.blk[b as usize].next = NIL;
        self.list_len -= 1;
    }

    fn push_tail(&mut self, b: u32) {
        self.blk[b as usize].prev = self.tail;
        self.blk[b as usize].next = NIL;
        if self.tail == NIL {
            self.head = b;
        } else {
            self.blk[self.tail as usize].next = b;
        }
        self.tail = b;
        self.list_len += 1;
    }

    fn uncache(&mut self, b: u32) {
        if let (Some(w), pos) = (self.watch.as_mut(), self.blk[b as usize].watch_pos) {
            if pos > 0 {
                // A watched hit is evicted: the hits end before it.
                let j = pos as usize - 1;
                for &k in &w.hits[j..] {
                    if self.blk[k as usize].ref_cnt == 0 {
                        w.evictable -= 1;
                    }
                    self.blk[k as usize].watch_pos = 0;
                }
                w.hits.truncate(j);
                w.dirty = true;
            }
        }
        let (h, next) = (self.blk[b as usize].hash, self.blk[b as usize].dup_next);
        if self.blk[b as usize].first {
            // The next duplicate, if any, becomes the answer.
            if next != NIL {
                self.blk[next as usize].first = true;
            }
            if h & PRIVATE != 0 {
                self.set_private_first(h, next);
            } else if next == NIL {
                self.map.remove(&h);
            } else {
                self.map.insert(h, next);
            }
        } else {
            let mut p = self.first_of(h).expect("a cached block's key is indexed");
            while self.blk[p as usize].dup_next != b {
                p = self.blk[p as usize].dup_next;
            }
            self.blk[p as usize].dup_next = next;
        }
        self.blk[b as usize].dup_next = NIL;
        self.blk[b as usize].first = false;
        self.blk[b as usize].hash = NO_HASH;
    }

    fn register(&mut self, b: u32, h: u64) {
        if let Some(w) = self.watch.as_mut() {
            if w.first_miss == Some(h) {
                w.dirty = true;
            }
        }
        self.blk[b as usize].hash = h;
        let oldest = if h & PRIVATE != 0 {
            let oldest = self.first_of(h);
            if oldest.is_none() {
                self.set_private_first(h, b);
            }
            oldest
        } else {
            match self.map.entry(h) {
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(b);
                    None
                }
                std::collections::hash_map::Entry::Occupied(e) => Some(*e.get()),
            }
        };
        match oldest {
            None => self.blk[b as usize].first = true,
            Some(mut p) => {
                while self.blk[p as usize].dup_next != NIL {
                    p = self.blk[p as usize].dup_next;
                }
                self.blk[p as usize].dup_next = b;
            }
        }
    }

    /// Pops the free-queue head, evicting it if cached; the caller checked `free_len`.
    fn pop_head(&mut self) -> u32 {
        let b = if self.num_blocks.is_none_or(|n| self.fresh_next < n) {
            let b = self.fresh_next;
            self.fresh_next += 1;
            self.blk.push(FRESH);
            b
        } else {
            let b = self.head;
            debug_assert_ne!(b, NIL, "pop from an empty free queue");
            self.unlink(b);
            if self.blk[b as usize].hash != NO_HASH {
                self.uncache(b);
                self.cached_free -= 1;
                self.stats.evicted_tokens += self.block as u64;
            }
            b
        };
        self.blk[b as usize].ref_cnt = 1;
        self.in_use += 1;
        b
    }

    fn touch(&mut self, b: u32) {
        if self.blk[b as usize].ref_cnt == 0 {
            if self.blk[b as usize].watch_pos > 0 {
                self.watch.as_mut().expect("watched block").evictable -= 1;
            }
            self.unlink(b);
            self.cached_free -= 1;
            self.in_use += 1;
        }
        self.blk[b as usize].ref_cnt += 1;
    }

    fn release(&mut self, b: u32) {
        self.blk[b as usize].ref_cnt -= 1;
        if self.blk[b as usize].ref_cnt == 0 {
            if self.blk[b as usize].watch_pos > 0 {
                self.watch.as_mut().expect("watched block").evictable += 1;
            }
            self.push_tail(b);
            self.in_use -= 1;
            if self.blk[b as usize].hash != NO_HASH {
                self.cached_free += 1;
            }
        }
    }

    fn note_peak(&mut self) {
        let used = (self.in_use + self.cached_free) * self.block as u64;
        self.stats.peak_used_tokens = self.stats.peak_used_tokens.max(used);
    }

    /// Registers the request's full blocks within its first `total` tokens.
    fn cache_full_blocks(&mut self, st: &mut ReqState, total: usize) {
        let full = total / self.block;
        let from = st.hashes.len();
        let shared_end = full.min(self.private_from(st.seq));
        if from < shared_end {
            // Hash the missing shareable blocks in one pass, then chain them.
            let mut fp = std::mem::take(&mut self.scratch);
            fp.clear();
            self.store.block_fingerprints(st.seq, from, shared_end - from, self.block, &mut fp);
            for (k, &f) in fp.iter().enumerate() {
                let i = from + k;
                let parent = if i == 0 { ROOT_HASH } else { st.hashes[i - 1] };
                st.hashes.push(shared_key(parent, f, self.block));
            }
            self.scratch = fp;
        }
        let seq = st.seq;
        st.hashes.extend((st.hashes.len()..full).map(|i| private_key(seq, i)));
        while st.cached_blocks < full {
            let i = st.cached_blocks;
            self.register(st.blocks[i], st.hashes[i]);
            st.cached_blocks += 1;
        }
    }

    /// Releases the request's blocks, last first; returns its state.
    fn free_request(&mut self, req: ReqId) -> ReqState {
        let st = self.reqs.take(req);
        self.stats.partial_block_waste_tokens += (st.blocks.len() * self.block - st.tokens) as u64;
        for &b in st.blocks.iter().rev() {
            self.release(b);
        }
        st
    }
}

impl PrefixCache for PagedCache {
    fn spec(&self) -> CacheSpec {
        CacheSpec {
            policy: Policy::Paged,
            block_size: Some(self.block as u32),
            page_size: None,
            capacity_tokens: self.num_blocks.map(|n| (n as u64 - 1) * self.block as u64),
        }
    }

    fn peek(&self, seq: SeqId, known: usize) -> usize {
        let (mut hashes, mut hits) = (Vec::new(), Vec::new());
        self.walk(seq, known, &mut hashes, &mut hits);
        hits.len() * self.block
    }

    fn admit(&mut self, req: ReqId, seq: SeqId, known: usize, max_new_tokens: usize) -> Option<Admitted> {
        debug_assert!(!self.reqs.is_live(req), "request admitted twice");
        // Scheduling any token needs a new block (the last known token is never a hit).
        if self.free_len() == 0 && max_new_tokens > 0 {
            return None;
        }
        let (hashes, mut hits) = match self.parked.remove(&req) {
            Some(p) if p.seq == seq => (p.hashes, p.hits),
            _ => (Vec::new(), Vec::new()),
        };
        let mut st = ReqState { seq, blocks: Vec::new(), hashes, cached_blocks: 0, tokens: 0 };
        let max_blocks = known.saturating_sub(1) / self.block;
        let mut evictable;
        match self.watch.take() {
            Some(w) if w.req == req && w.seq == seq && w.max_blocks == max_blocks => {
                // Retry of the watched request: its hits are current up to the last event.
                hits = w.hits;
                evictable = w.evictable;
                if w.dirty {
                    let before = hits.len();
                    self.extend_hits(seq, max_blocks, &mut st.hashes, &mut hits);
                    for (k, &b) in hits.iter().enumerate().skip(before) {
                        self.blk[b as usize].watch_pos = k as u32 + 1;
                        evictable += (self.blk[b as usize].ref_cnt == 0) as usize;
                    }
                }
            }
            other => {
                if let Some(old) = other {
                    self.unwatch(old);
                }
                self.walk(seq, known, &mut st.hashes, &mut hits);
                evictable = hits.iter().filter(|&&b| self.blk[b as usize].ref_cnt == 0).count();
                for (k, &b) in hits.iter().enumerate() {
                    self.blk[b as usize].watch_pos = k as u32 + 1;
                }
            }
        }
        let hit = hits.len() * self.block;
        let total = hit + (known - hit).min(max_new_tokens);
        let need = total.div_ceil(self.block) - hits.len();
        if (need + evictable) as u64 > self.free_len() {
            let first_miss = (hits.len() < max_blocks).then(|| st.hashes[hits.len()]);
            self.watch = Some(Watch { req, seq, max_blocks, hits, evictable, first_miss, dirty: false });
            self.parked.insert(req, Parked { seq, hashes: st.hashes, hits: Vec::new() });
            return None;
        }
        for &b in &hits {
            self.blk[b as usize].watch_pos = 0;
        }
        for &b in &hits {
            self.touch(b);
        }
        st.blocks = hits;
        st.cached_blocks = st.blocks.len();
        for _ in 0..need {
            let b = self.pop_head();
            st.blocks.push(b);
        }
        st.tokens = total;
        self.cache_full_blocks(&mut st, total);
        self.reqs.put(req, st);
        self.note_peak();
        Some(Admitted { hit_tokens: hit, allocated_tokens: total })
    }

    fn grow(&mut self, req: ReqId, total_tokens: usize) -> bool {
        let block = self.block;
        let st = self.reqs.get_mut(req).expect("request admitted");
        if total_tokens <= st.blocks.len() * block && total_tokens / block <= st.cached_blocks {
            // Room in the last block and no block filled: nothing to allocate or register.
            st.tokens = st.tokens.max(total_tokens);
            return true;
        }
        let mut st = self.reqs.take(req);
        debug_assert!(total_tokens <= self.store.seq_len(st.seq), "scheduling unknown tokens");
        let need = total_tokens.div_ceil(self.block).saturating_sub(st.blocks.len());
        if need as u64 > self.free_len() {
            self.reqs.put(req, st);
            return false;
        }
        for _ in 0..need {
            let b = self.pop_head();
            st.blocks.push(b);
        }
        st.tokens = st.tokens.max(total_tokens);
        self.cache_full_blocks(&mut st, total_tokens);
        self.reqs.put(req, st);
        self.note_peak();
        true
    }

    fn computed(&mut self, _req: ReqId, _computed_tokens: usize) {
        // vLLM registers block hashes at allocation time; nothing happens after the step.
    }

    fn finish(&mut self, req: ReqId) {
        self.free_request(req);
        self.parked.remove(&req);
    }

    fn preempt(&mut self, req: ReqId) {
        // Recompute mode: blocks freed (tail first), still hashed, likely re-hit on resume.
        // The block table is remembered as the next lookup's answer: the prefix of it that still
        // answers its hashes on resume is a hit without a map probe.
        let ReqState { seq, mut blocks, hashes, cached_blocks, .. } = self.free_request(req);
        let answering = blocks[..cached_blocks].iter().zip(&hashes).take_while(|(&b, &h)| self.answers(b, h)).count();
        blocks.truncate(answering);
        self.parked.insert(req, Parked { seq, hashes, hits: blocks });
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
        let minted = self.fresh_next as usize;
        let mut refs = vec![0u32; minted];
        for st in self.reqs.live() {
            assert_eq!(st.blocks.len(), st.tokens.div_ceil(self.block), "block table size");
            for &b in &st.blocks {
                refs[b as usize] += 1;
            }
        }
        let ref_cnt: Vec<u32> = self.blk.iter().map(|r| r.ref_cnt).collect();
        assert_eq!(refs, ref_cnt, "ref counts != block-table membership");
        let in_list = self.free_queue();
        let released = &in_list[in_list.len() - self.list_len as usize..];
        assert!(released.iter().all(|&b| self.blk[b as usize].ref_cnt == 0), "in-use block in the free queue");
        let in_use = ref_cnt.iter().filter(|&&r| r > 0).count() as u64;
        assert_eq!(in_use, self.in_use, "in-use count");
        assert_eq!(in_use + self.list_len, minted as u64 - 1, "blocks not conserved");
        let cached_free = released.iter().filter(|&&b| self.is_cached(b)).count() as u64;
        assert_eq!(cached_free, self.cached_free, "cached free count");
        let mut heads: Vec<(u64, u32)> = self.map.iter().map(|(&h, &b)| (h, b)).collect();
        for (seq, p) in self.private.iter().enumerate() {
            let live = p.first.iter().filter(|&&b| b != NIL).count();
            assert_eq!(live, p.live as usize, "private live count");
            assert!(live > 0 || p.first.is_empty(), "an empty private index is kept");
            let keys = p.first.iter().enumerate().filter(|&(_, &b)| b != NIL);
            heads.extend(keys.map(|(j, &b)| (private_key(seq as SeqId, p.from as usize + j), b)));
        }
        let mut chained = 0;
        for (h, first) in heads {
            let mut b = first;
            while b != NIL {
                assert_eq!(self.blk[b as usize].hash, h, "hash map chain");
                assert_eq!(self.blk[b as usize].first, b == first, "first-carrier flag");
                chained += 1;
                b = self.blk[b as usize].dup_next;
            }
        }
        assert_eq!(chained, self.blk.iter().filter(|r| r.hash != NO_HASH).count(), "cached blocks not in the map");
        let watched = self.watch.as_ref().map_or(&[][..], |w| &w.hits[..]);
        assert_eq!(self.blk.iter().filter(|r| r.watch_pos > 0).count(), watched.len(), "stray watch positions");
        for (k, &b) in watched.iter().enumerate() {
            assert_eq!(self.blk[b as usize].watch_pos as usize, k + 1, "watch position");
            assert!(self.is_cached(b), "a watched hit was evicted");
        }
        if let Some(w) = &self.watch {
            let evictable = w.hits.iter().filter(|&&b| self.blk[b as usize].ref_cnt == 0).count();
            assert_eq!(w.evictable, evictable, "watched evictable count");
        }
    }
}

fn shared_key(parent: u64, fingerprint: u64, len: usize) -> u64 {
    chain_hash(parent, fingerprint, len) & !PRIVATE
}

fn private_key(seq: SeqId, i: usize) -> u64 {
    debug_assert!(i < 1 << 32);
    PRIVATE | (seq as u64) << 32 | i as u64
}

/// (sequence, block index) of a private key.
fn split_private(key: u64) -> (usize, usize) {
    (((key & !PRIVATE) >> 32) as usize, key as u32 as usize)
}

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;
