//! A storage tier (L3) under HiCache's host pool, as SGLang 0.5.23 runs it with
//! `--hicache-storage-backend file` (docs/engines/hicache-storage.md names each rule's source;
//! `URC` = `mem_cache/unified_radix_cache.py` `UnifiedRadixCache`):
//! - **the store** (module `store`) holds the pages written, each named by its whole prefix
//!   (`get_hash_str` chains each page's tokens with the previous page's key), so a lookup's hit
//!   is the run of held pages from its first page on, and instances of one model share it;
//! - **lookups** start when a request joins the waiting queue (`Scheduler._prefetch_kvcache`):
//!   past its device + host match, anchored at the deepest matched node when that node has a
//!   host copy or is the root, over the known tokens less the last, page-aligned; none below
//!   `prefetch_threshold` (256), none while the lookups in flight hold half the host pool
//!   (`prefetch_rate_limited`, a paced retry armed); the anchor is host-locked meanwhile;
//! - **the drain** at the start of each step (`URC.check_hicache_events`): a hit gets host
//!   slots (`allocate_storage_hit`: `evict_host(hit)` when short, then a partial allocation of
//!   at least the threshold) and is read; a read done is inserted as host-only nodes under the
//!   anchor (`UnifiedTreeCore.insert_host`); a storage write done releases its node's host lock;
//! - **writes**: every node whose device-to-host write is acknowledged is written, host-locked
//!   until the write's acknowledgement is drained; the backend skips pages it holds;
//! - **paced retries** (`StoragePrefetchRetries`): a lookup refused by the rate limit or a
//!   query that found too little is retried after a number of passes, in queue order; an
//!   admitted request's retry stays, out of the queue's reach, an aborted request's goes;
//! - **I/O** is the model's input: a query, read or write submitted during one scheduler pass is
//!   done `latency + bytes / bandwidth` later and seen at the first drain of a later pass, never
//!   within the pass that submitted it (zero latency and infinite bandwidth give SGLang's lag-0
//!   step clock: an item queued during step k is handled at step k's I/O point).

pub mod store;

use super::hicache::{HostTier, StorageStats, WritePolicy};
use super::tree::{NodeId, RadixTree};
use super::ReqId;
use crate::workload::{SeqId, TokenStore};
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use store::Timed;
pub use store::{Eviction, Store};

/// `--hicache-storage-prefetch-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum PrefetchPolicy {
    /// Admit at the first poll with what was read by then.
    #[cfg_attr(feature = "clap", value(name = "best_effort"))]
    BestEffort,
    /// Wait until the whole read is inserted.
    #[cfg_attr(feature = "clap", value(name = "wait_complete"))]
    WaitComplete,
    /// Wait until a deadline from the first blocked poll, then as best_effort (the default).
    #[default]
    #[cfg_attr(feature = "clap", value(name = "timeout"))]
    Timeout,
}

impl PrefetchPolicy {
    /// The name SGLang's flag takes.
    pub fn name(self) -> &'static str {
        match self {
            PrefetchPolicy::BestEffort => "best_effort",
            PrefetchPolicy::WaitComplete => "wait_complete",
            PrefetchPolicy::Timeout => "timeout",
        }
    }
}

/// The storage tier's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StorageConfig {
    pub policy: PrefetchPolicy,
    /// `prefetch_threshold`: the least lookup and hit, tokens.
    pub threshold: usize,
    /// `prefetch_timeout_base` and the per-page part, seconds.
    pub timeout_base_s: f64,
    pub timeout_per_page_s: f64,
    /// `--hicache-storage-prefetch-retry-poll-interval` (passes) and `-max-attempts`.
    pub retry_interval: u64,
    pub retry_max: u32,
    /// Seconds before a query, read or write starts to move data.
    pub latency_s: f64,
    /// Pages a second a write moves (infinite: at once).
    pub pages_per_s: f64,
    /// Pages a second a read moves (infinite: at once). A read's progress is acknowledged a
    /// whole batch of [`STORAGE_BATCH_PAGES`] at a time: a read cut short by the policy keeps
    /// the batches acknowledged by then.
    pub read_pages_per_s: f64,
    /// The store's capacity in pages (the file backend's `max_size`; Mooncake's global segments
    /// over one instance's page); `None`: unbounded.
    pub max_pages: Option<u64>,
    /// How a full store makes room.
    pub eviction: Eviction,
    /// One store for every instance of the run (Mooncake's; each adds its `max_pages`), or one
    /// store each.
    pub shared: bool,
    /// Bytes one page takes in the store over the instance (each rank's share, times the ranks
    /// that store one: one for MLA); 0 where unknown (a store built in a test).
    #[serde(skip)]
    pub page_bytes: f64,
}

impl StorageConfig {
    /// The run report's words for the tier.
    pub fn describe(&self) -> String {
        let store = match (self.eviction, self.max_pages) {
            (Eviction::Mooncake, Some(max)) => format!("mooncake, shared, {max} pages per instance"),
            (Eviction::Mooncake, None) => "mooncake, shared".to_string(),
            (Eviction::File, Some(max)) => format!("file, {max} pages"),
            (Eviction::File, None) => "file".to_string(),
        };
        format!(
            "storage tier ({store}) · prefetch {} · {:.0} pages/s · latency {:.2} ms",
            self.policy.name(),
            self.pages_per_s,
            self.latency_s * 1e3
        )
    }

    /// SGLang's defaults under `policy`, with I/O that takes no time.
    pub fn new(policy: PrefetchPolicy) -> Self {
        Self {
            policy,
            threshold: 256,
            timeout_base_s: 1.0,
            timeout_per_page_s: 0.25 / 1024.0,
            retry_interval: 8,
            retry_max: 8,
            latency_s: 0.0,
            pages_per_s: f64::INFINITY,
            read_pages_per_s: f64::INFINITY,
            max_pages: None,
            eviction: Eviction::File,
            shared: false,
            page_bytes: 0.0,
        }
    }

    /// GiB the instance's part of the store takes (its `max_pages` pages; Mooncake's: the
    /// segment it adds); `None` for an unbounded store.
    pub fn store_gib(&self) -> Option<f64> {
        self.max_pages.map(|p| p as f64 * self.page_bytes / (1u64 << 30) as f64)
    }
}

/// `STORAGE_BATCH_SIZE`: the pages a read acknowledges at a time.
pub const STORAGE_BATCH_PAGES: usize = 128;

/// A lookup in flight (`URC.ongoing_prefetch`).
#[derive(Debug, Clone, Copy)]
struct Prefetch {
    anchor: NodeId,
    /// Whether the anchor was host-locked (it has a host copy, or write-back pins it).
    locked: bool,
    seq: SeqId,
    /// Where the lookup starts (the match's end) and the tokens looked up.
    start: usize,
    len: usize,
    /// The query's hit, once drained; the host slots allocated, once allocated.
    hit: Option<usize>,
    alloc: Option<usize>,
    /// Tokens read so far, and when the read started.
    completed: usize,
    read_at: f64,
    /// This lookup's number (a read of an earlier one is not current).
    id: u64,
}

#[derive(Debug, Clone, Copy)]
enum Io {
    Query {
        req: ReqId,
        id: u64,
    },
    Read {
        req: ReqId,
        id: u64,
        alloc: usize,
    },
    /// Pages `from..to` of `seq`'s chain, the host copy of `node` and the nodes split from it.
    Write {
        node: NodeId,
        seq: SeqId,
        from: usize,
        to: usize,
    },
}

/// A paced retry (`StoragePrefetchRetries`).
#[derive(Debug, Clone, Copy)]
struct Retry {
    due: Option<u64>,
    hit_end: Option<usize>,
}

impl Retry {
    fn new(hit_end: Option<usize>) -> Self {
        Self { due: None, hit_end }
    }
}

/// The storage tier of one instance.
#[derive(Debug)]
pub struct StorageTier {
    pub cfg: StorageConfig,
    page: usize,
    refill: bool,
    capacity_limit: u64,
    store: Store,
    /// Scheduler passes so far.
    pass: u64,
    /// Queries and reads in flight (few: the rate limit bounds them): (pass submitted, done at,
    /// what), in submission order.
    io: VecDeque<(u64, f64, Io)>,
    /// Writes in flight (every host write's pages: many), soonest done first.
    writes: BinaryHeap<Reverse<Timed<Io>>>,
    /// Writes submitted so far (their order when several land at one pass).
    write_count: u64,
    /// Done I/O to drain: query hits (request, lookup, hit), reads, write acknowledgements.
    hits: Vec<(ReqId, u64, usize)>,
    reads: Vec<(ReqId, u64, usize)>,
    written: Vec<NodeId>,
    /// Host slots to release at the next drain.
    release: u64,
    prefetch: FxHashMap<ReqId, Prefetch>,
    next_id: u64,
    /// `prefetch_tokens_occupied`.
    occupied: u64,
    /// The paced retries of requests in the waiting queue, and those of requests admitted since
    /// (SGLang keeps them, out of the queue's reach: they only keep `pop_ready`'s walk going),
    /// with the least pass at which one of those does (`u64::MAX`: none).
    retries: FxHashMap<ReqId, Retry>,
    parked: FxHashMap<ReqId, Retry>,
    parked_open: u64,
    /// A bit per request, set while the retries due at a pass are placed in the queue.
    due_bits: Vec<u64>,
    retry_step: u64,
    /// Per request: re-issues so far, the match at its last lookup, when its timeout's clock
    /// started, and whether its deadline passed.
    attempts: FxHashMap<ReqId, u32>,
    last_match: FxHashMap<ReqId, usize>,
    wait_since: FxHashMap<ReqId, f64>,
    expired: FxHashMap<ReqId, bool>,
    acked: Vec<(NodeId, u32)>,
    /// Reads of terminated lookups still in flight: the tokens inserted before their end.
    cut: FxHashMap<u64, usize>,
    stats: StorageStats,
}

impl StorageTier {
    /// An empty tier under a host pool of `host_tokens` and pages of `page` tokens.
    pub fn new(cfg: StorageConfig, page: usize, write: WritePolicy, host_tokens: u64) -> Self {
        Self {
            cfg,
            page,
            refill: write != WritePolicy::WriteBack,
            capacity_limit: host_tokens / 2,
            store: Store::new(page, cfg.max_pages, cfg.eviction),
            pass: 0,
            io: VecDeque::new(),
            writes: BinaryHeap::new(),
            write_count: 0,
            hits: Vec::new(),
            reads: Vec::new(),
            written: Vec::new(),
            release: 0,
            prefetch: FxHashMap::default(),
            next_id: 0,
            occupied: 0,
            retries: FxHashMap::default(),
            parked: FxHashMap::default(),
            parked_open: u64::MAX,
            due_bits: Vec::new(),
            retry_step: 0,
            attempts: FxHashMap::default(),
            last_match: FxHashMap::default(),
            wait_since: FxHashMap::default(),
            expired: FxHashMap::default(),
            acked: Vec::new(),
            cut: FxHashMap::default(),
            stats: StorageStats::default(),
        }
    }

    /// The figures so far (the pages written, of the store this tier holds: none while a
    /// shared store is not lent to it).
    pub fn stats(&self) -> StorageStats {
        let w = self.store.written();
        StorageStats { pages_written: w.new, pages_skipped: w.held, ..self.stats }
    }

    fn submit(&mut self, now: f64, pages: usize, io: Io) {
        let rate = if matches!(io, Io::Read { .. }) { self.cfg.read_pages_per_s } else { self.cfg.pages_per_s };
        let done = now + self.cfg.latency_s + pages as f64 / rate;
        if let Io::Write { seq, from, to, .. } = io {
            // The store lands it when done; this instance sees its acknowledgement then.
            self.store.submit(done, seq, from, to);
            self.write_count += 1;
            self.writes.push(Reverse(Timed { done, n: self.write_count, item: io }));
        } else {
            self.io.push_back((self.pass, done, io));
        }
    }

    /// Swaps this tier's store with `other`: a store shared by several instances is lent to
    /// each for its scheduler pass.
    pub fn swap_store(&mut self, other: &mut Store) {
        debug_assert_eq!(other.page(), self.page, "a store of this tier's pages");
        std::mem::swap(&mut self.store, other);
    }

    /// When a lookup's I/O in flight next lands (a scheduler pass is then due), if any. Writes
    /// do not wake an idle engine: they land at its next pass, whenever that is (a write still
    /// in flight when the run ends is never done).
    pub fn next_event(&self) -> Option<f64> {
        self.io.iter().map(|&(_, t, _)| t).min_by(f64::total_cmp)
    }

    /// Whether anything is in flight or waiting to be drained.
    pub fn busy(&self) -> bool {
        !(self.io.is_empty()
            && self.writes.is_empty()
            && self.hits.is_empty()
            && self.reads.is_empty()
            && self.written.is_empty())
    }

    /// The I/O point before a scheduler pass at `now`: what was submitted in earlier passes and
    /// is done by now lands — writes, then queries, then reads — and the pass starts.
    /// Write-back's writes acknowledged during the last pass's evictions go out first.
    pub fn begin_pass(&mut self, store: &TokenStore, tree: &mut RadixTree, host: &mut HostTier, now: f64) {
        // Write-back's writes acknowledged during the last pass's evictions go out with it.
        host.take_acked(&mut self.acked);
        self.queue_writes(tree, now);
        self.pass += 1;
        let pass = self.pass;
        let due = |&(p, t, _): &(u64, f64, Io)| p < pass && t <= now;
        let landed: Vec<Io> = {
            // Every write in flight was submitted in an earlier pass (this one has just begun):
            // those done by now land, in submission order.
            let mut done: Vec<Timed<Io>> = Vec::new();
            while self.writes.peek().is_some_and(|w| w.0.done <= now) {
                done.push(self.writes.pop().expect("peeked").0);
            }
            done.sort_unstable_by_key(|f| f.n);
            let mut out: Vec<Io> = done.into_iter().map(|f| f.item).collect();
            let mut keep = VecDeque::with_capacity(self.io.len());
            for item in self.io.drain(..) {
                if due(&item) {
                    out.push(item.2);
                } else {
                    keep.push_back(item);
                }
            }
            self.io = keep;
            out
        };
        // The writes done by now, this instance's and (in a shared store) the others'.
        self.store.land(store, now);
        for io in &landed {
            if let Io::Write { node, .. } = *io {
                self.written.push(node);
            }
        }
        for io in &landed {
            if let Io::Query { req, id } = *io {
                let Some(p) = self.prefetch.get(&req).filter(|p| p.id == id).copied() else { continue };
                let hit = self.store.hit(store, p.seq, p.start, p.len);
                self.hits.push((req, id, hit));
            }
        }
        for io in &landed {
            if let Io::Read { req, id, alloc } = *io {
                self.reads.push((req, id, alloc));
            }
        }
    }

    /// Queues the storage writes of the acknowledged host writes (`write_backup_storage`): each
    /// node and the nodes split from it since, host-locked until the write's acknowledgement is
    /// drained.
    fn queue_writes(&mut self, tree: &mut RadixTree, now: f64) {
        let acked = std::mem::take(&mut self.acked);
        for (n, len) in acked {
            if !tree.is_alive(n) || !tree.has_host_copy(n) {
                continue;
            }
            let (seq, off, nlen) = tree.node_span(n);
            let end = off + nlen;
            // The fragments a split made since the write: `n` and the ancestors it covered.
            let (mut hi, mut x) = (end, n);
            loop {
                let l = tree.node_len(x);
                tree.host_lock(x);
                self.submit(now, l / self.page, Io::Write { node: x, seq, from: hi - l, to: hi });
                hi -= l;
                let up = tree.parent(x);
                if end - hi >= len as usize || tree.is_root(up) {
                    break;
                }
                x = up;
            }
        }
    }

    /// `_prefetch_kvcache` for request `req` of `seq[..known]` joining the queue (or retried):
    /// the arrival-time match (stamping the path) and the lookup past it. `hit_end`: a retry's
    /// known hit end.
    #[allow(clippy::too_many_arguments)]
    pub fn lookup(
        &mut self,
        store: &TokenStore,
        tree: &mut RadixTree,
        req: ReqId,
        seq: SeqId,
        known: usize,
        now: f64,
        hit_end: Option<usize>,
    ) {
        let f = tree.match_tiers(store, seq, known.saturating_sub(1));
        let matched = f.device + f.host;
        self.last_match.insert(req, matched);
        let anchor = f.host_node;
        if !(tree.is_root(anchor) || tree.has_host_copy(anchor)) {
            return;
        }
        let mut end = known.saturating_sub(1);
        if let Some(h) = hit_end.filter(|&h| matched < h && h <= end) {
            end = h;
        }
        let len = tree.align(end.saturating_sub(matched));
        // `prefetch_from_storage`.
        self.retries.remove(&req);
        if self.expired.get(&req).copied().unwrap_or(false) || self.prefetch.contains_key(&req) {
            return;
        }
        if len < self.cfg.threshold {
            return;
        }
        if self.occupied >= self.capacity_limit {
            self.retries.insert(req, Retry::new(hit_end));
            return;
        }
        let locked = !tree.is_root(anchor) && (tree.has_host_copy(anchor) || !self.refill);
        if locked {
            tree.host_lock(anchor);
        }
        self.occupied += len as u64;
        self.next_id += 1;
        let id = self.next_id;
        self.prefetch.insert(
            req,
            Prefetch {
                anchor,
                locked,
                seq,
                start: matched,
                len,
                hit: None,
                alloc: None,
                completed: 0,
                read_at: 0.0,
                id,
            },
        );
        self.stats.lookups += 1;
        self.submit(now, 0, Io::Query { req, id });
    }

    /// Ends request `req`'s lookup without a result (`revoke_pending_prefetch`).
    fn revoke(&mut self, tree: &mut RadixTree, req: ReqId) {
        if let Some(p) = self.prefetch.remove(&req) {
            if p.locked {
                tree.host_unlock(p.anchor);
            }
            self.occupied -= p.len as u64;
        }
    }

    fn poll_miss(&mut self, req: ReqId, hit_end: Option<usize>) {
        self.retries.insert(req, Retry::new(hit_end));
    }

    /// `_handle_prefetch_result`: inserts what `req`'s lookup read under its anchor.
    fn insert(&mut self, store: &TokenStore, tree: &mut RadixTree, host: &mut HostTier, req: ReqId) {
        let Some(p) = self.prefetch.remove(&req) else { return };
        let done = p.completed;
        let (present, taken, dropped) = if done > 0 {
            tree.insert_host(store, p.anchor, p.seq, p.start, p.start + done, self.refill)
        } else {
            (0, 0, false)
        };
        if dropped {
            // Released at the next drain.
            self.release += done as u64;
        } else {
            host.staged -= (present + taken) as u64;
            self.stats.inserted_tokens += (done - present) as u64;
        }
        if p.locked {
            tree.host_unlock(p.anchor);
        }
        self.occupied -= p.len as u64;
    }

    /// The storage part of `check_hicache_events` at `now`: queues the writes of host writes
    /// acknowledged, then drains hits (allocating host slots), reads done (inserting them),
    /// write acknowledgements (host locks released) and slot releases; then the paced retries
    /// due (`pop_ready`), returned in `waiting`'s order for the caller to look up again.
    pub fn drain(&mut self, store: &TokenStore, tree: &mut RadixTree, host: &mut HostTier, now: f64) {
        host.take_acked(&mut self.acked);
        self.queue_writes(tree, now);
        let release = self.release;
        for (req, id, hit) in std::mem::take(&mut self.hits) {
            let Some(p) = self.prefetch.get(&req).filter(|p| p.id == id).copied() else { continue };
            self.stats.hit_tokens += hit as u64;
            if hit < self.cfg.threshold {
                self.poll_miss(req, None);
                self.revoke(tree, req);
                continue;
            }
            // `allocate_storage_hit`.
            let mut alloc = hit;
            if (host.host_free(tree) as usize) < hit {
                host.evict_host(tree, hit as u64);
                if (host.host_free(tree) as usize) < hit {
                    let free = host.host_free(tree) as usize;
                    alloc = hit.min(free - free % self.page);
                    if alloc < self.cfg.threshold {
                        self.poll_miss(req, Some(p.start + hit));
                        self.revoke(tree, req);
                        continue;
                    }
                }
            }
            host.staged += alloc as u64;
            let e = self.prefetch.get_mut(&req).expect("current");
            e.hit = Some(hit);
            e.alloc = Some(alloc);
            e.read_at = now;
            self.submit(now, alloc / self.page, Io::Read { req, id, alloc });
        }
        for (req, id, alloc) in std::mem::take(&mut self.reads) {
            let current = self.prefetch.get(&req).is_some_and(|p| p.id == id);
            if current {
                self.prefetch.get_mut(&req).expect("current").completed = alloc;
                self.insert(store, tree, host, req);
            } else {
                // Terminated earlier: what was not inserted goes back.
                let done = self.cut.remove(&id).unwrap_or(0);
                self.release += (alloc - done) as u64;
            }
        }
        for n in std::mem::take(&mut self.written) {
            tree.host_unlock(n);
        }
        host.staged -= release;
        self.release -= release;
    }

    /// `pop_ready` over the waiting queue `waiting` (head first): the requests whose paced
    /// retry is due, each with its known hit end, in queue order. SGLang walks the whole queue
    /// for the few requests with a retry; the retries of requests in the queue are walked here
    /// instead (the queue only orders those due).
    pub fn due_retries(&mut self, waiting: &[ReqId], out: &mut Vec<(ReqId, Option<usize>)>) {
        self.retry_step += 1;
        let Some(&head) = waiting.first() else { return };
        if self.retries.is_empty() && self.parked.is_empty() {
            return;
        }
        self.retries.remove(&head);
        let step = self.retry_step;
        if self.parked_open > step && !self.retries.values().any(|r| r.due.is_none_or(|d| d <= step)) {
            return;
        }
        debug_assert!(
            self.retries.keys().all(|id| waiting.contains(id)) && !self.parked.keys().any(|id| waiting.contains(id)),
            "the retries of queued requests, and only those, are walked"
        );
        let first = out.len();
        let (max, interval, attempts) = (self.cfg.retry_max, self.cfg.retry_interval, &mut self.attempts);
        self.retries.retain(|&id, r| {
            if attempts.get(&id).copied().unwrap_or(0) >= max {
                return false;
            }
            if interval == 0 {
                // No paced retries.
                return false;
            }
            let due = *r.due.get_or_insert(step + interval);
            if due > step {
                return true;
            }
            *attempts.entry(id).or_default() += 1;
            out.push((id, r.hit_end));
            false
        });
        let due = &mut out[first..];
        if due.len() > 1 {
            // Their places in the queue: one pass over it, until all are found, reading a bit
            // per request.
            for &(id, _) in due.iter() {
                let (w, b) = (id as usize / 64, id % 64);
                if self.due_bits.len() <= w {
                    self.due_bits.resize(w + 1, 0);
                }
                self.due_bits[w] |= 1 << b;
            }
            // Found from the queue's tail (requests with a retry are mostly the latest queued),
            // then put in queue order.
            let mut order: Vec<ReqId> = Vec::with_capacity(due.len());
            for &id in waiting.iter().rev() {
                let (w, b) = (id as usize / 64, id % 64);
                if self.due_bits.get(w).is_some_and(|x| x >> b & 1 == 1) {
                    order.push(id);
                    if order.len() == due.len() {
                        break;
                    }
                }
            }
            order.reverse();
            for &(id, _) in due.iter() {
                self.due_bits[id as usize / 64] = 0;
            }
            due.sort_unstable_by_key(|(id, _)| order.iter().position(|x| x == id).unwrap_or(usize::MAX));
        }
    }

    /// The tokens of `p`'s read acknowledged by `now`: whole batches moved since it started
    /// (after its latency), all of it once done.
    fn progress(&self, p: &Prefetch, now: f64) -> usize {
        let Some(alloc) = p.alloc else { return 0 };
        let elapsed = now - p.read_at - self.cfg.latency_s;
        if elapsed <= 0.0 {
            return p.completed;
        }
        let pages = elapsed * self.cfg.read_pages_per_s;
        let batches = (pages / STORAGE_BATCH_PAGES as f64 + 1e-9).floor();
        let tokens = batches * (STORAGE_BATCH_PAGES * self.page) as f64;
        if tokens >= alloc as f64 {
            alloc
        } else {
            p.completed.max(tokens as usize)
        }
    }

    /// `check_prefetch_progress` for waiting request `req` at `now`: whether it may be
    /// admitted (its lookup done, revoked or terminated by the policy, what was read inserted).
    pub fn ready(
        &mut self,
        store: &TokenStore,
        tree: &mut RadixTree,
        host: &mut HostTier,
        req: ReqId,
        now: f64,
    ) -> bool {
        let Some(mut p) = self.prefetch.get(&req).copied() else { return true };
        // The read's progress acknowledged so far (drained at this pass's start).
        p.completed = self.progress(&p, now);
        self.prefetch.get_mut(&req).expect("in flight").completed = p.completed;
        let stop = match self.cfg.policy {
            PrefetchPolicy::BestEffort => true,
            PrefetchPolicy::WaitComplete => false,
            PrefetchPolicy::Timeout => {
                let complete = p.alloc.is_some_and(|a| p.completed >= a);
                let timeout = self.cfg.timeout_base_s + (p.len / self.page) as f64 * self.cfg.timeout_per_page_s;
                !complete && self.wait_since.get(&req).is_some_and(|&t| now - t > timeout)
            }
        };
        if !stop {
            if self.cfg.policy == PrefetchPolicy::Timeout {
                self.wait_since.entry(req).or_insert(now);
            }
            return false;
        }
        if self.cfg.policy == PrefetchPolicy::Timeout {
            self.retries.remove(&req);
            self.expired.insert(req, true);
        }
        if p.alloc.is_none() {
            if !self.expired.get(&req).copied().unwrap_or(false) {
                self.poll_miss(req, None);
            }
            self.revoke(tree, req);
        } else {
            // The read stops: what it read so far is inserted; its remaining acknowledgements
            // land at the next pass, which releases the rest of its host slots.
            self.cut.insert(p.id, p.completed);
            for item in self.io.iter_mut() {
                if matches!(item.2, Io::Read { id, .. } if id == p.id) {
                    item.1 = item.1.min(now);
                }
            }
            self.insert(store, tree, host, req);
        }
        true
    }

    /// Request `req` was admitted (`finish_storage_prefetch_admission`): its timer stops; a
    /// retry it has stays, out of the queue.
    pub fn admitted(&mut self, req: ReqId) {
        self.wait_since.remove(&req);
        if let Some(r) = self.retries.remove(&req) {
            // Open from the pass it was due at (an unarmed one: at once).
            self.parked_open = self.parked_open.min(r.due.unwrap_or(0));
            self.parked.insert(req, r);
        }
    }

    /// The least pass at which a parked retry keeps `pop_ready`'s walk going.
    fn reopen(&mut self) {
        self.parked_open = self.parked.values().map(|r| r.due.unwrap_or(0)).min().unwrap_or(u64::MAX);
    }

    /// Request `req` left the queue aborted (`release_aborted_request`): its lookup is revoked,
    /// its retry cancelled, its counters dropped.
    pub fn dropped(&mut self, tree: &mut RadixTree, req: ReqId) {
        self.revoke(tree, req);
        self.retries.remove(&req);
        if self.parked.remove(&req).is_some() {
            self.reopen();
        }
        self.attempts.remove(&req);
        self.last_match.remove(&req);
        self.wait_since.remove(&req);
        self.expired.remove(&req);
    }

    /// `_prefetch_after_device_hit_loss`: whether request `req`, now matching `matched` tokens,
    /// matched more at its last lookup and may look up again (the caller re-issues it and skips
    /// the request this pass).
    pub fn hit_lost(&mut self, req: ReqId, matched: usize) -> bool {
        let Some(&last) = self.last_match.get(&req) else { return false };
        if last == 0 || matched >= last {
            return false;
        }
        if self.attempts.get(&req).copied().unwrap_or(0) >= self.cfg.retry_max {
            self.last_match.insert(req, matched);
            return false;
        }
        *self.attempts.entry(req).or_default() += 1;
        true
    }

    /// A retracted request re-queued: its retry counters start again.
    pub fn requeued(&mut self, req: ReqId) {
        self.attempts.remove(&req);
        self.last_match.remove(&req);
        if let Some(r) = self.parked.remove(&req) {
            self.retries.insert(req, r);
            self.reopen();
        }
    }
}
