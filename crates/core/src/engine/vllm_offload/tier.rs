//! The host (CPU) tier of vLLM's native KV offloading: a fixed number of chunk slots keyed by
//! the chunk's prefix identity, each chunk being stored (written from the GPU, not readable
//! yet), ready (readable and evictable) or loading (pinned by the loads reading it). vLLM 0.33
//! `v1/kv_offload/cpu/manager.py` (`CPUOffloadingManager`) and its default eviction policy
//! `cpu/policies/lru.py` (the request-ranked LRU of vLLM 0.31 on): every chunk has a rank
//! `(request rank, −position)`; a request takes a provisional rank from a global counter at its
//! first store, so its chunks go tail first; when the request finishes, each of its chunks takes
//! a fresh rank, tail to head, so its head is the most recently used chunk of all. Eviction
//! takes the smallest rank among the ready chunks, never one offered in the same store, and only
//! the shortfall; a store that cannot be placed whole is refused whole (`prepare_store` returns
//! `None`). Lookups change no rank.

use rustc_hash::FxHashMap;
use std::collections::BTreeSet;

/// A chunk's rank: (request rank, `u32::MAX` − position), smallest evicted first.
type Rank = (u64, u32);

/// A held chunk's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Being written from the GPU (reference count −1 upstream): not readable, not evictable.
    Storing,
    /// Readable and evictable.
    Ready,
    /// Pinned by this many loads (reference count > 0 upstream).
    Loading(u32),
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    state: State,
    rank: Rank,
}

/// What a lookup found past the GPU's hit: consecutive present chunks, or a chunk still being
/// stored among them (vLLM 0.25+ `HIT_PENDING`: the request waits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// This many leading chunks are readable (ready or being loaded by another request).
    Hits(usize),
    /// A chunk among the leading present ones is still being stored.
    Pending,
}

/// The host tier's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TierStats {
    /// Chunks written to the tier (stores placed).
    pub stored_chunks: u64,
    /// Stores refused whole for lack of room.
    pub refused_stores: u64,
    /// Chunks evicted to make room.
    pub evicted_chunks: u64,
    /// Most chunks held at once.
    pub peak_chunks: u64,
}

/// The host tier's chunks.
#[derive(Debug)]
pub struct HostTier {
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

impl HostTier {
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

    /// Chunks held (in any state).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the tier holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `key` is held, in any state.
    pub fn contains(&self, key: u32) -> bool {
        self.entries.contains_key(&key)
    }

    /// `key`'s state, if held.
    pub fn state(&self, key: u32) -> Option<State> {
        self.entries.get(&key).map(|e| e.state)
    }

    /// The leading chunks of `keys` that are held, or `Pending` when one of them is still being
    /// stored (`CPUOffloadingManager.lookup`).
    pub fn lookup(&self, keys: impl Iterator<Item = u32>) -> Found {
        let mut hits = 0;
        for key in keys {
            match self.state(key) {
                None => break,
                Some(State::Storing) => return Found::Pending,
                Some(_) => hits += 1,
            }
        }
        Found::Hits(hits)
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

    /// Checks the tier's bookkeeping; panics when broken (tests).
    pub fn check_invariants(&self) {
        assert!(self.entries.len() <= self.capacity, "host tier over capacity");
        let ready: BTreeSet<(Rank, u32)> =
            self.entries.iter().filter(|(_, e)| e.state == State::Ready).map(|(&k, e)| (e.rank, k)).collect();
        assert_eq!(ready, self.evictable, "evictable set != ready chunks");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `keys` at positions 0.. of one request.
    fn at(keys: &[u32]) -> Vec<(u32, u32)> {
        keys.iter().enumerate().map(|(i, &k)| (k, i as u32)).collect()
    }

    fn ready(t: &mut HostTier, keys: &[u32], major: u64) {
        assert!(t.store(&at(keys), major, keys));
        t.stored(keys);
    }

    /// vLLM 0.31+ ranks: a request's tail goes first; a finish makes its head the most recent.
    #[test]
    fn eviction_takes_the_tail_of_the_oldest_rank_first() {
        let mut t = HostTier::new(4);
        let a = t.fresh_rank();
        ready(&mut t, &[10, 11, 12, 13], a);
        // Two new chunks: A's tail (13, 12) go.
        let d = t.fresh_rank();
        assert!(t.store(&at(&[20, 21]), d, &[20, 21]));
        assert_eq!(t.lookup([10, 11, 12].into_iter()), Found::Hits(2));
        assert_eq!(t.stats.evicted_chunks, 2);
        t.check_invariants();
    }

    #[test]
    fn a_finished_request_outlives_an_older_running_one() {
        let mut t = HostTier::new(4);
        let a = t.fresh_rank();
        ready(&mut t, &[10, 11], a);
        let b = t.fresh_rank();
        ready(&mut t, &[20, 21], b);
        // A finishes: its chunks become the most recent; B's (running, older rank) go first.
        t.finished(&[10, 11]);
        let c = t.fresh_rank();
        assert!(t.store(&at(&[30]), c, &[30]));
        assert_eq!(t.lookup([20, 21].into_iter()), Found::Hits(1));
        assert_eq!(t.lookup([10, 11].into_iter()), Found::Hits(2));
        t.check_invariants();
    }

    #[test]
    fn a_store_that_does_not_fit_whole_is_refused_whole() {
        let mut t = HostTier::new(3);
        let a = t.fresh_rank();
        assert!(t.store(&at(&[1, 2]), a, &[1, 2])); // still being stored: not evictable
        assert!(!t.store(&at(&[3, 4]), a, &[3, 4]));
        assert_eq!((t.len(), t.stats.refused_stores), (2, 1));
        assert_eq!(t.lookup([1, 2].into_iter()), Found::Pending);
        t.stored(&[1, 2]);
        // Offered chunks are protected: 1 is offered again (held), so only 2 may go.
        assert!(!t.store(&at(&[3, 4, 5]), a, &[1, 3, 4, 5]));
        assert!(t.store(&at(&[3, 4]), a, &[1, 3, 4]));
        assert_eq!(t.lookup([1].into_iter()), Found::Hits(1));
        assert!(!t.contains(2));
        t.check_invariants();
    }

    #[test]
    fn a_pinned_chunk_is_not_evicted() {
        let mut t = HostTier::new(2);
        let a = t.fresh_rank();
        ready(&mut t, &[1, 2], a);
        t.pin(&[1, 2]);
        assert_eq!(t.state(1), Some(State::Loading(1)));
        assert!(!t.store(&at(&[3]), a, &[3]));
        t.unpin(&[1]);
        assert!(t.store(&at(&[3]), a, &[3]));
        assert!(!t.contains(1) && t.contains(2));
        t.unpin(&[2]);
        t.check_invariants();
    }
}
