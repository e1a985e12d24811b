//! The host tier's plain model, which the tier is held to in tests: every ready chunk in one
//! ordered set by rank, eviction its first unprotected entries.

use super::{State, TierStats};
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;

/// A chunk's rank: (request rank, `u32::MAX` − position), smallest evicted first.
type Rank = (u64, u32);

#[derive(Debug, Clone, Copy)]
struct Entry {
    state: State,
    rank: Rank,
}

/// The tier as one ordered set of its ready chunks.
#[derive(Debug)]
pub struct Reference {
    capacity: usize,
    entries: FxHashMap<u32, Entry>,
    /// Ready chunks by rank.
    evictable: BTreeSet<(Rank, u32)>,
    next_rank: u64,
    /// A buffer for a store's protected chunks.
    protected: Vec<u32>,
    pub stats: TierStats,
}

/// The rank of position `pos` of a request ranked `major`.
fn rank(major: u64, pos: u32) -> Rank {
    (major, u32::MAX - pos)
}

impl Reference {
    /// A tier of `capacity` chunks.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: FxHashMap::default(),
            evictable: BTreeSet::new(),
            next_rank: 0,
            protected: Vec::new(),
            stats: TierStats::default(),
        }
    }

    /// A fresh request rank (a request's first store, or one chunk's rank at a finish).
    pub fn fresh_rank(&mut self) -> u64 {
        self.next_rank += 1;
        self.next_rank
    }

    /// `key`'s state, if held.
    pub fn state(&self, key: u32) -> Option<State> {
        self.entries.get(&key).map(|e| e.state)
    }

    /// Pins `keys` (all held and readable) for a load (`prepare_load`).
    pub fn pin(&mut self, keys: &[u32]) {
        for &key in keys {
            let e = self.entries.get_mut(&key).expect("a loaded chunk is held");
            e.state = match e.state {
                State::Ready => {
                    self.evictable.remove(&(e.rank, key));
                    State::Loading(1)
                }
                State::Loading(n) => State::Loading(n + 1),
                State::Storing => unreachable!("a chunk being stored is not loaded"),
            };
        }
    }

    /// Unpins `keys` after their load (`complete_load`).
    pub fn unpin(&mut self, keys: &[u32]) {
        for &key in keys {
            let e = self.entries.get_mut(&key).expect("a pinned chunk is held");
            e.state = match e.state {
                State::Loading(1) => {
                    self.evictable.insert((e.rank, key));
                    State::Ready
                }
                State::Loading(n) => State::Loading(n - 1),
                s => unreachable!("unpinning a chunk in state {s:?}"),
            };
        }
    }

    /// Places the chunks `new` (none held; each a key and its position in a request ranked
    /// `major`) as being stored, evicting the shortfall by rank, never a chunk of `offered` (the
    /// whole store offer, held chunks included). `false`, changing nothing, when they do not all
    /// fit (`prepare_store`).
    pub fn store(&mut self, new: &[(u32, u32)], major: u64, offered: &[u32]) -> bool {
        if new.is_empty() {
            return true;
        }
        let free = self.capacity - self.entries.len();
        // The offer's chunks already held and ready: never evicted by it.
        let mut protected = std::mem::take(&mut self.protected);
        protected.clear();
        protected.extend(
            offered.iter().copied().filter(|k| matches!(self.entries.get(k), Some(Entry { state: State::Ready, .. }))),
        );
        if new.len() > free + self.evictable.len() - protected.len() {
            self.stats.refused_stores += 1;
            self.protected = protected;
            return false;
        }
        protected.sort_unstable();
        for _ in free..new.len() {
            let victim =
                *self.evictable.iter().find(|(_, k)| protected.binary_search(k).is_err()).expect("room was counted");
            self.evictable.remove(&victim);
            self.entries.remove(&victim.1);
            self.stats.evicted_chunks += 1;
        }
        self.protected = protected;
        for &(key, pos) in new {
            let previous = self.entries.insert(key, Entry { state: State::Storing, rank: rank(major, pos) });
            debug_assert!(previous.is_none(), "a held chunk stored again");
        }
        self.stats.stored_chunks += new.len() as u64;
        self.stats.peak_chunks = self.stats.peak_chunks.max(self.entries.len() as u64);
        true
    }

    /// A request ranked `major` accessed `key` at `pos`: a held chunk takes the rank
    /// `(major, −pos)` when that is above its own.
    pub fn raise(&mut self, key: u32, major: u64, pos: u32) {
        let r = rank(major, pos);
        let Some(e) = self.entries.get_mut(&key) else { return };
        if e.rank >= r {
            return;
        }
        if e.state == State::Ready {
            self.evictable.remove(&(e.rank, key));
            self.evictable.insert((r, key));
        }
        e.rank = r;
    }

    /// `keys`' stores ended: they are readable (`complete_store`).
    pub fn stored(&mut self, keys: &[u32]) {
        for &key in keys {
            if let Some(e) = self.entries.get_mut(&key) {
                debug_assert_eq!(e.state, State::Storing, "a chunk stored twice");
                e.state = State::Ready;
                self.evictable.insert((e.rank, key));
            }
        }
    }

    /// A request finished: each of its chunks `keys` (head first) that is held takes a fresh
    /// rank, tail to head (`on_request_finished`).
    pub fn finished(&mut self, keys: &[u32]) {
        for &key in keys.iter().rev() {
            if !self.entries.contains_key(&key) {
                continue;
            }
            let r = (self.fresh_rank(), 0);
            let e = self.entries.get_mut(&key).expect("checked");
            if e.state == State::Ready {
                self.evictable.remove(&(e.rank, key));
                self.evictable.insert((r, key));
            }
            e.rank = r;
        }
    }

    /// Every held chunk: its key, state and rank.
    pub fn entries(&self) -> impl Iterator<Item = (u32, State, Rank)> + '_ {
        self.entries.iter().map(|(&k, e)| (k, e.state, e.rank))
    }
}
