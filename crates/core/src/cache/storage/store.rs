//! The storage backend's content: every page written, as a trie of token spans.
//!
//! SGLang's file backend keeps one file per page, named by a key that chains the page's tokens
//! with the previous page's key (`get_hash_str`), so a page is "held" for a lookup exactly when
//! some write stored a page with the same tokens after the same whole prefix. This trie holds
//! that set without a key per page: a path from the root spells a written prefix (spans are
//! views into the workload's sequences, never copied), and each node says whether its pages are
//! held — a write of pages `from..to` of a sequence lays the path to `to`, splitting nodes at
//! `from`, `to` and wherever the contents part, and marks the nodes in `from..to` held; the
//! prefix before `from` may stay unheld (a write still in flight, or pages evicted). Memory grows
//! with the writes, not with the pages they hold, and content is compared exactly (run-wise,
//! [`TokenStore::lcp`]) rather than trusted to a hash.
//!
//! Writes land in the store when they are done (a write in flight is not seen, whoever looks),
//! in the order they were submitted; a store shared by several instances (Mooncake's) sees every
//! instance's writes that way.
//!
//! A capacity evicts the least recently used pages, as the backend does ([`Eviction`]). Each
//! page's last use is a tick of one clock; a write stores (or refreshes) its pages in order, so
//! a held node's pages carry consecutive ticks from its `tick`, and the oldest page is the first
//! page of the held node with the least `tick`.

use crate::workload::{SeqId, TokenStore};
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

type Id = u32;
const ROOT: Id = 0;

/// Mooncake's `eviction_high_watermark_ratio` and `eviction_ratio` (v0.3.12 defaults).
const MOONCAKE_HIGH_WATERMARK: f64 = 0.9;
const MOONCAKE_EVICTION_RATIO: f64 = 0.05;

#[derive(Debug, Clone, Copy)]
struct Node {
    parent: Id,
    /// `seq[off..off + len]` is this node's span; its depth is `off` (the spans on the path
    /// from the root spell `seq[..off]`).
    seq: SeqId,
    off: u32,
    len: u32,
    /// Every page of the span is held.
    held: bool,
    /// The tick of the span's first page's last write (held nodes).
    tick: u64,
}

/// How a full store makes room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Eviction {
    /// SGLang's file backend under a `max_size` (`LRUFileEvictor.reserve`,
    /// `mem_cache/hicache_storage.py`, 0.5.23): a page new to a full store first evicts the least
    /// recently written pages down to one under 90 % of the capacity.
    #[default]
    File,
    /// The Mooncake Store master (`BatchEvict`, `mooncake-store/src/master_service.cpp`,
    /// v0.3.12): once the store is filled past its high watermark (90 %), 5 % of its objects go,
    /// least recently leased first; a lookup that finds a page leases it (`BatchExistKey`), a
    /// write does not. Its lease's protection (10 s) and its eviction thread's 10 ms poll are not
    /// modelled: eviction happens as the page that crosses the watermark is written.
    Mooncake,
}

impl Default for Store {
    /// An empty, unbounded store of one-token pages.
    fn default() -> Self {
        Self::new(1, None, Eviction::File)
    }
}

/// Something in flight: done at `done`, the `n`-th submitted; ordered by `done`, then `n` (a
/// min-heap of them, in `Reverse`, yields the soonest done, the earliest submitted first).
#[derive(Debug, Clone, Copy)]
pub struct Timed<T> {
    pub done: f64,
    pub n: u64,
    pub item: T,
}

impl<T> PartialEq for Timed<T> {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == std::cmp::Ordering::Equal
    }
}
impl<T> Eq for Timed<T> {}
impl<T> PartialOrd for Timed<T> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for Timed<T> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.done.total_cmp(&o.done).then(self.n.cmp(&o.n))
    }
}

/// A write submitted: pages `from..to` of `seq`.
#[derive(Debug, Clone, Copy)]
struct Pending {
    seq: SeqId,
    from: usize,
    to: usize,
}

/// The pages a write found new and already held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    pub new: u64,
    pub held: u64,
}

/// Written pages of `page` tokens, at most `max` of them.
#[derive(Debug)]
pub struct Store {
    page: usize,
    max: Option<u64>,
    eviction: Eviction,
    nodes: Vec<Node>,
    /// Children by (parent, first page's key).
    children: FxHashMap<(Id, u64), Id>,
    pages: u64,
    clock: u64,
    /// Held nodes by first tick, oldest first (under a capacity only; entries whose node has
    /// since been refreshed, split or evicted are stale and skipped).
    lru: BinaryHeap<Reverse<(u64, Id)>>,
    /// Writes in flight, soonest done first, and how many were submitted.
    pending: BinaryHeap<Reverse<Timed<Pending>>>,
    submitted: u64,
    /// What the writes landed so far found.
    written: Written,
}

impl Store {
    /// An empty store of pages of `page` tokens, holding at most `max` pages (`None`: no bound)
    /// and making room the `eviction` way.
    pub fn new(page: usize, max: Option<u64>, eviction: Eviction) -> Self {
        assert!((1..=crate::workload::tokens::MAX_BLOCK_TOKENS).contains(&page), "page size out of range");
        let root = Node { parent: ROOT, seq: 0, off: 0, len: 0, held: true, tick: 0 };
        Self {
            page,
            max,
            eviction,
            nodes: vec![root],
            children: FxHashMap::default(),
            pages: 0,
            clock: 0,
            lru: BinaryHeap::new(),
            pending: BinaryHeap::new(),
            submitted: 0,
            written: Written::default(),
        }
    }

    /// What the writes landed so far found: pages new to the store, and pages it held.
    pub fn written(&self) -> Written {
        self.written
    }

    /// Submits a write of pages `from..to` of `seq`, done at `done`.
    pub fn submit(&mut self, done: f64, seq: SeqId, from: usize, to: usize) {
        self.submitted += 1;
        self.pending.push(Reverse(Timed { done, n: self.submitted, item: Pending { seq, from, to } }));
    }

    /// Forgets the writes in flight (a run that ends before they are done).
    pub fn drop_pending(&mut self) {
        self.pending.clear();
    }

    /// Lands the writes done by `now`, in the order they were submitted.
    pub fn land(&mut self, store: &TokenStore, now: f64) {
        if self.pending.peek().is_none_or(|p| p.0.done > now) {
            return;
        }
        let mut done: Vec<Timed<Pending>> = Vec::new();
        while self.pending.peek().is_some_and(|p| p.0.done <= now) {
            done.push(self.pending.pop().expect("peeked").0);
        }
        done.sort_unstable_by_key(|p| p.n);
        for Timed { item: p, .. } in done {
            let w = self.write(store, p.seq, p.from, p.to);
            self.written.new += w.new;
            self.written.held += w.held;
        }
    }

    /// Tokens a page holds.
    pub fn page(&self) -> usize {
        self.page
    }

    /// Pages held.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    fn key(&self, store: &TokenStore, seq: SeqId, pos: usize) -> u64 {
        if self.page == 1 {
            store.token(seq, pos) as u64
        } else {
            store.fingerprint(seq, pos, self.page)
        }
    }

    fn pages_of(&self, c: Id) -> u64 {
        (self.nodes[c as usize].len as usize / self.page) as u64
    }

    /// The child of `n` whose span starts with `seq[pos..]`'s first page, and how many tokens
    /// (whole pages) of its span `seq[pos..end]` matches.
    fn step(&self, store: &TokenStore, n: Id, seq: SeqId, pos: usize, end: usize) -> Option<(Id, usize)> {
        if end < pos + self.page {
            return None;
        }
        let c = *self.children.get(&(n, self.key(store, seq, pos)))?;
        let node = self.nodes[c as usize];
        let m = store.lcp((node.seq, node.off as usize), (seq, pos), (node.len as usize).min(end - pos));
        Some((c, m - m % self.page))
    }

    /// Marks `c` held, its pages written now.
    fn stamp(&mut self, c: Id) {
        let n = self.pages_of(c);
        let node = &mut self.nodes[c as usize];
        node.held = true;
        node.tick = self.clock + 1;
        self.clock += n;
        if self.max.is_some() {
            self.lru.push(Reverse((node.tick, c)));
        }
    }

    /// Splits `c` after its first `at` tokens (whole pages, `0 < at < len`): a new node, the
    /// head, takes `c`'s place under its parent, and `c` keeps the rest and its children.
    fn split(&mut self, store: &TokenStore, c: Id, at: usize) -> Id {
        let node = self.nodes[c as usize];
        debug_assert!(at > 0 && at < node.len as usize && at.is_multiple_of(self.page));
        let head = self.nodes.len() as Id;
        self.nodes.push(Node { len: at as u32, ..node });
        let under = self.key(store, node.seq, node.off as usize);
        self.children.insert((node.parent, under), head);
        let tail = &mut self.nodes[c as usize];
        tail.parent = head;
        tail.off += at as u32;
        tail.len -= at as u32;
        tail.tick += (at / self.page) as u64;
        let tick = tail.tick;
        let k = self.key(store, node.seq, node.off as usize + at);
        self.children.insert((head, k), c);
        if node.held && self.max.is_some() {
            self.lru.push(Reverse((node.tick, head)));
            self.lru.push(Reverse((tick, c)));
        }
        head
    }

    /// Makes room: the least recently used pages go — down to one page under 90 % of the
    /// capacity (file), or 5 % of the pages held (Mooncake).
    fn evict(&mut self, store: &TokenStore, max: u64) {
        let mut drop = match self.eviction {
            Eviction::File => self.pages.saturating_sub(((max as f64 * 0.9) as u64).saturating_sub(1)),
            Eviction::Mooncake => (self.pages as f64 * MOONCAKE_EVICTION_RATIO).ceil() as u64,
        };
        while drop > 0 {
            let Some(Reverse((tick, c))) = self.lru.pop() else { break };
            let node = self.nodes[c as usize];
            if !node.held || node.tick != tick {
                continue;
            }
            let n = self.pages_of(c);
            let gone = if n <= drop {
                self.nodes[c as usize].held = false;
                c
            } else {
                // The oldest `drop` pages: the node's head (the split queues the tail again).
                self.split(store, c, drop as usize * self.page)
            };
            let k = self.pages_of(gone);
            self.nodes[gone as usize].held = false;
            self.pages -= k;
            drop -= k;
        }
    }

    /// Pages the store takes before it must make room.
    fn room(&self, max: u64) -> u64 {
        match self.eviction {
            Eviction::File => max.saturating_sub(self.pages),
            Eviction::Mooncake => ((max as f64 * MOONCAKE_HIGH_WATERMARK).ceil() as u64).saturating_sub(self.pages),
        }
    }

    /// Writes pages `from..to` of `seq` (page-aligned) in order: each page new or refreshed;
    /// the pages before `from` need not be held.
    pub fn write(&mut self, store: &TokenStore, seq: SeqId, from: usize, to: usize) -> Written {
        debug_assert!(from.is_multiple_of(self.page) && to.is_multiple_of(self.page) && from <= to);
        let mut out = Written::default();
        let (mut n, mut pos) = (ROOT, 0usize);
        // Room was just made: the page that asked for it goes in, whatever was freed.
        let mut made_room = false;
        while pos < to {
            let Some((mut c, m)) = self.step(store, n, seq, pos, to) else {
                // The rest is new: a path to `from` and the written span, not held yet (the
                // next turn of the loop stores it).
                let back = (n, pos);
                for (a, b) in [(pos, from.max(pos)), (from.max(pos), to)] {
                    if a < b {
                        let id = self.nodes.len() as Id;
                        self.nodes.push(Node {
                            parent: n,
                            seq,
                            off: a as u32,
                            len: (b - a) as u32,
                            held: false,
                            tick: 0,
                        });
                        self.children.insert((n, self.key(store, seq, a)), id);
                        n = id;
                    }
                }
                (n, pos) = back;
                continue;
            };
            debug_assert!(m > 0, "two first pages with one fingerprint but other tokens");
            if m == 0 {
                break;
            }
            if m < self.nodes[c as usize].len as usize {
                c = self.split(store, c, m);
            }
            // A node lies wholly before `from` or wholly inside `from..to`.
            if pos < from && from < pos + m {
                n = self.split(store, c, from - pos);
                pos = from;
                continue;
            }
            if pos >= from {
                let k = (m / self.page) as u64;
                if self.nodes[c as usize].held {
                    out.held += k;
                } else if let Some(max) = self.max.filter(|&max| self.room(max) < k) {
                    let room = if made_room { self.room(max).max(1) } else { self.room(max) };
                    if room == 0 {
                        // A page new to a full store: room first (which may evict the pages
                        // around this one; the walk resumes from `n`, which stays on the path).
                        self.evict(store, max);
                        made_room = true;
                        continue;
                    }
                    // What fits now; the rest at the next turn.
                    if room < k {
                        c = self.split(store, c, room as usize * self.page);
                    }
                    out.new += self.pages_of(c);
                    self.pages += self.pages_of(c);
                } else {
                    out.new += k;
                    self.pages += k;
                }
                self.stamp(c);
                made_room = false;
                let m = self.nodes[c as usize].len as usize;
                n = c;
                pos += m;
                continue;
            }
            n = c;
            pos += m;
        }
        out
    }

    /// The tokens (whole pages) of `seq[start..start + len]` held, from `start` on without a gap;
    /// under Mooncake's eviction the pages found are used now (their lease).
    pub fn hit(&mut self, store: &TokenStore, seq: SeqId, start: usize, len: usize) -> usize {
        let end = start + len;
        let touch = self.eviction == Eviction::Mooncake && self.max.is_some();
        let (mut n, mut pos) = (ROOT, 0usize);
        while pos < end {
            let Some((mut c, m)) = self.step(store, n, seq, pos, end) else { break };
            let node = self.nodes[c as usize];
            if pos + m > start && !node.held {
                break;
            }
            if touch && pos < start && start < pos + m {
                // Only the pages from `start` on are looked up.
                n = self.split(store, c, start - pos);
                pos = start;
                continue;
            }
            let part = m < node.len as usize;
            if touch && pos >= start && m > 0 {
                if part {
                    c = self.split(store, c, m);
                }
                self.stamp(c);
            }
            if part && pos + m < end {
                // The contents part inside this node.
                pos += m;
                break;
            }
            n = c;
            pos += m;
        }
        pos.saturating_sub(start).min(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// The backend as SGLang and Mooncake keep it: one entry per page, named by its whole
    /// prefix, with its last use's tick; a page new to a full store first drops the oldest pages
    /// (the file backend: down to one under 90 % of the cap; Mooncake: 5 % of them once 90 % full,
    /// a lookup's pages found being used).
    #[derive(Default)]
    struct Files {
        pages: HashMap<Vec<u32>, u64>,
        clock: u64,
        mooncake: bool,
    }

    impl Files {
        fn write(&mut self, seq: &[u32], page: usize, from: usize, to: usize, max: Option<u64>) -> Written {
            let mut out = Written::default();
            for end in (from + page..=to).step_by(page) {
                self.clock += 1;
                let key = seq[..end].to_vec();
                if let Some(t) = self.pages.get_mut(&key) {
                    *t = self.clock;
                    out.held += 1;
                    continue;
                }
                let full = |m: u64| match self.mooncake {
                    false => self.pages.len() as u64 >= m,
                    true => self.pages.len() as f64 >= (m as f64 * 0.9).ceil(),
                };
                if let Some(max) = max.filter(|&m| full(m)) {
                    let mut by_age: Vec<(u64, Vec<u32>)> = self.pages.iter().map(|(k, &t)| (t, k.clone())).collect();
                    by_age.sort();
                    let drop = match self.mooncake {
                        false => self.pages.len().saturating_sub(((max as f64 * 0.9) as usize).saturating_sub(1)),
                        true => (self.pages.len() as f64 * 0.05).ceil() as usize,
                    };
                    for (_, k) in by_age.into_iter().take(drop) {
                        self.pages.remove(&k);
                    }
                }
                self.pages.insert(key, self.clock);
                out.new += 1;
            }
            out
        }

        fn hit(&mut self, seq: &[u32], page: usize, start: usize, len: usize, max: Option<u64>) -> usize {
            let mut hit = 0;
            while hit + page <= len {
                let Some(t) = self.pages.get_mut(&seq[..start + hit + page]) else { break };
                if self.mooncake && max.is_some() {
                    self.clock += 1;
                    *t = self.clock;
                }
                hit += page;
            }
            hit
        }
    }

    fn tokens(seqs: &[Vec<u32>]) -> TokenStore {
        TokenStore::from_seqs(seqs)
    }

    #[test]
    fn a_write_holds_its_pages_and_not_the_prefix_before_them() {
        let seqs = vec![(0..12).collect::<Vec<u32>>(), [0, 1, 2, 3, 9, 9, 9, 9].to_vec()];
        let t = tokens(&seqs);
        let mut s = Store::new(2, None, Eviction::File);
        assert_eq!(s.write(&t, 0, 4, 10), Written { new: 3, held: 0 });
        // Pages 0..4 were never written: nothing from 0 on, three pages from 4 on.
        assert_eq!(s.hit(&t, 0, 0, 12), 0);
        assert_eq!(s.hit(&t, 0, 4, 8), 6);
        // The other sequence shares 0..4 only.
        assert_eq!(s.hit(&t, 1, 4, 4), 0);
        assert_eq!(s.write(&t, 0, 0, 6), Written { new: 2, held: 1 });
        assert_eq!(s.hit(&t, 0, 0, 12), 10);
        assert_eq!(s.hit(&t, 1, 0, 8), 4);
        assert_eq!(s.pages(), 5);
    }

    #[test]
    fn a_full_store_drops_the_least_recently_written_pages() {
        let seqs = vec![(0..8).collect::<Vec<u32>>(), (100..108).collect()];
        let t = tokens(&seqs);
        // Ten pages of one token: the eleventh new page keeps 8 of the oldest out.
        let mut s = Store::new(1, Some(10), Eviction::File);
        s.write(&t, 0, 0, 8);
        s.write(&t, 1, 0, 2);
        // Refreshes pages 0..2 of the first sequence: now the newest.
        assert_eq!(s.write(&t, 0, 0, 2), Written { new: 0, held: 2 });
        // Full: 10 pages. One more evicts down to 8 (the oldest three: 2, 3, 4 of sequence 0).
        assert_eq!(s.write(&t, 1, 2, 3), Written { new: 1, held: 0 });
        assert_eq!(s.pages(), 9);
        assert_eq!(s.hit(&t, 0, 0, 8), 2);
        assert_eq!(s.hit(&t, 0, 5, 3), 3);
        assert_eq!(s.hit(&t, 1, 0, 8), 3);
    }

    fn seqs() -> impl Strategy<Value = Vec<Vec<u32>>> {
        // Few token values: sequences share prefixes and part inside pages.
        prop::collection::vec(prop::collection::vec(0u32..3, 1..24), 1..5)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]
        #[test]
        fn the_trie_holds_what_one_file_per_page_holds(
            seqs in seqs(),
            page in prop::sample::select(vec![1usize, 2, 4]),
            max in prop::option::of(1u64..12),
            mooncake in any::<bool>(),
            ops in prop::collection::vec((any::<bool>(), 0usize..5, 0usize..24, 0usize..24), 1..40),
        ) {
            let t = tokens(&seqs);
            let eviction = if mooncake { Eviction::Mooncake } else { Eviction::File };
            let mut s = Store::new(page, max, eviction);
            let mut files = Files { mooncake, ..Files::default() };
            for (write, i, a, b) in ops {
                let i = i % seqs.len();
                let n = seqs[i].len() - seqs[i].len() % page;
                let (a, b) = (a.min(n) / page * page, b.min(n) / page * page);
                let (lo, hi) = (a.min(b), a.max(b));
                if write {
                    prop_assert_eq!(s.write(&t, i as SeqId, lo, hi), files.write(&seqs[i], page, lo, hi, max));
                } else {
                    prop_assert_eq!(s.hit(&t, i as SeqId, lo, hi - lo), files.hit(&seqs[i], page, lo, hi - lo, max));
                }
                prop_assert_eq!(s.pages(), files.pages.len() as u64);
            }
        }
    }
}
