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
//!
//! The order is kept without a search tree per chunk: ranks given at a finish only grow, so
//! those chunks queue in one list in rank order; a request's provisional chunks are stored in
//! increasing position, so each request's are a stack (its tail on top), the requests ordered
//! by their rank. List entries are checked when met (a chunk re-ranked, evicted or not ready
//! since is passed over); a ready chunk whose entry was passed over while it was not ready, or
//! stored out of position order, waits in a small exact set. `reference` is the plain model
//! (one ordered set of every ready chunk) the tests hold this one to.

#[cfg(test)]
pub mod reference;

use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound::{Excluded, Unbounded};

/// A chunk's rank: (request rank, `u32::MAX` − position), smallest evicted first; a rank given
/// at a finish has position part 0.
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

/// A held chunk: its state, its rank and whether its rank's entry still stands in a list (the
/// finish queue or its request's stack; else, when ready, it is in the exact set). Packed in 16
/// bytes with 4-byte alignment (20 a slot of the map with its key, against 40 for the plain
/// fields): the map's misses are most of the tier's cost, and fewer bytes mean fewer of them.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// The rank's request part, low and high halves.
    major: [u32; 2],
    /// The rank's position part.
    minor: u32,
    /// The state (0 being stored, 1 ready, 1 + n pinned by n loads) and [`LISTED`].
    bits: u32,
}

/// [`Entry::bits`]' flag for a rank whose list entry stands.
const LISTED: u32 = 1 << 31;

impl Entry {
    fn new(state: State, rank: Rank, listed: bool) -> Self {
        let mut e = Entry { major: [0; 2], minor: 0, bits: 0 };
        e.set_state(state);
        e.set_rank(rank);
        e.set_listed(listed);
        e
    }

    fn rank(&self) -> Rank {
        (self.major[0] as u64 | (self.major[1] as u64) << 32, self.minor)
    }

    fn set_rank(&mut self, (major, minor): Rank) {
        (self.major, self.minor) = ([major as u32, (major >> 32) as u32], minor);
    }

    fn state(&self) -> State {
        match self.bits & !LISTED {
            0 => State::Storing,
            1 => State::Ready,
            n => State::Loading(n - 1),
        }
    }

    fn set_state(&mut self, s: State) {
        let code = match s {
            State::Storing => 0,
            State::Ready => 1,
            State::Loading(n) => {
                assert!(n < LISTED - 1, "more loads of one chunk than requests");
                n + 1
            }
        };
        self.bits = self.bits & LISTED | code;
    }

    fn listed(&self) -> bool {
        self.bits & LISTED != 0
    }

    fn set_listed(&mut self, listed: bool) {
        self.bits = self.bits & !LISTED | if listed { LISTED } else { 0 };
    }
}

/// What a lookup found past the GPU's hit: consecutive present chunks, or a chunk among them
/// still being stored (vLLM 0.25+ `HIT_PENDING`) or being loaded by another request
/// (`_blocks_being_loaded`, 0.15+): in both the request waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// This many leading chunks are ready.
    Hits(usize),
    /// A chunk among the leading present ones is still being stored.
    Pending,
    /// A chunk among the leading ready ones is being loaded.
    Loading,
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
    /// Ready chunks.
    ready: usize,
    /// Chunks ranked at a finish, in rank order (entries checked when met).
    finished: VecDeque<(Rank, u32)>,
    /// Chunks of each provisional request rank, in position order: the top is evicted first.
    provisional: BTreeMap<u64, Vec<(Rank, u32)>>,
    /// Ready chunks whose list entry was passed over, by rank (exact).
    unlisted: BTreeSet<(Rank, u32)>,
    next_rank: u64,
    /// A buffer for a store's protected chunks ([`HostTier::store`]).
    protected: Vec<u32>,
    pub stats: TierStats,
}

/// The rank of position `pos` of a request ranked `major`.
fn rank(major: u64, pos: u32) -> Rank {
    (major, u32::MAX - pos)
}

/// Whether `r` was given at a finish.
fn at_finish(r: Rank) -> bool {
    r.1 == 0
}

/// Whether the list entry `(r, key)` stands for a ready chunk outside `protected` (sorted):
/// the victim its list offers. Otherwise the entry is to be passed over, and a chunk it still
/// stands for leaves its list (to the exact set `unlisted` if it is ready: protected now).
fn usable(
    entries: &mut FxHashMap<u32, Entry>,
    unlisted: &mut BTreeSet<(Rank, u32)>,
    protected: &[u32],
    r: Rank,
    key: u32,
) -> bool {
    let Some(e) = entries.get_mut(&key).filter(|e| e.rank() == r && e.listed()) else { return false };
    if e.state() == State::Ready && protected.binary_search(&key).is_err() {
        return true;
    }
    e.set_listed(false);
    if e.state() == State::Ready {
        unlisted.insert((r, key));
    }
    false
}

/// No eviction candidate (above every packed `(rank, key)`: request ranks stay below `u64::MAX`).
const NONE: u128 = u128::MAX;

impl HostTier {
    /// A tier of `capacity` chunks.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: FxHashMap::default(),
            ready: 0,
            finished: VecDeque::new(),
            provisional: BTreeMap::new(),
            unlisted: BTreeSet::new(),
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
        self.entries.get(&key).map(|e| e.state())
    }

    /// What the leading chunks that `visit` hands over (it stops when told `false`) hold
    /// (`CPUOffloadingManager.lookup` per chunk, and the connector's being-loaded check).
    pub fn lookup(&self, visit: impl FnOnce(&mut dyn FnMut(u32) -> bool)) -> Found {
        let (mut hits, mut pending, mut loading) = (0, false, false);
        visit(&mut |key| match self.state(key) {
            None => false,
            Some(State::Storing) => {
                pending = true;
                false
            }
            Some(s) => {
                hits += 1;
                loading |= matches!(s, State::Loading(_));
                true
            }
        });
        match (pending, loading) {
            (true, _) => Found::Pending,
            (false, true) => Found::Loading,
            (false, false) => Found::Hits(hits),
        }
    }

    /// `key` (entry `e`) became ready.
    fn now_ready(&mut self, key: u32, e: Entry) {
        self.ready += 1;
        if !e.listed() {
            self.unlisted.insert((e.rank(), key));
        }
    }

    /// `key` (entry `e`, ready) is no longer.
    fn not_ready(&mut self, key: u32, e: Entry) {
        self.ready -= 1;
        if !e.listed() {
            self.unlisted.remove(&(e.rank(), key));
        }
    }

    /// Pins `keys` (all held and readable) for a load (`prepare_load`).
    pub fn pin(&mut self, keys: &[u32]) {
        for &key in keys {
            let e = *self.entries.get(&key).expect("a loaded chunk is held");
            let state = match e.state() {
                State::Ready => {
                    self.not_ready(key, e);
                    State::Loading(1)
                }
                State::Loading(n) => State::Loading(n + 1),
                State::Storing => unreachable!("a chunk being stored is not loaded"),
            };
            self.entries.get_mut(&key).expect("held").set_state(state);
        }
    }

    /// Unpins `keys` after their load (`complete_load`).
    pub fn unpin(&mut self, keys: &[u32]) {
        for &key in keys {
            let e = self.entries.get_mut(&key).expect("a pinned chunk is held");
            match e.state() {
                State::Loading(1) => {
                    e.set_state(State::Ready);
                    let e = *e;
                    self.now_ready(key, e);
                }
                State::Loading(n) => e.set_state(State::Loading(n - 1)),
                s => unreachable!("unpinning a chunk in state {s:?}"),
            }
        }
    }

    /// The finish queue's first standing, ready chunk not in `protected` (sorted), passing over
    /// the entries before it that no longer stand or whose chunk is not ready now (moving a
    /// ready protected one to the exact set).
    fn finished_victim(&mut self, protected: &[u32]) -> Option<(Rank, u32)> {
        let (entries, unlisted) = (&mut self.entries, &mut self.unlisted);
        while let Some(&(r, key)) = self.finished.front() {
            if usable(entries, unlisted, protected, r, key) {
                return Some((r, key));
            }
            self.finished.pop_front();
        }
        None
    }

    /// The provisional stacks' first standing, ready top not in `protected`, from the stack of
    /// the smallest request rank on (stacks emptied on the way are dropped).
    fn provisional_victim(&mut self, protected: &[u32]) -> Option<(Rank, u32)> {
        let (entries, unlisted) = (&mut self.entries, &mut self.unlisted);
        while let Some(mut stack) = self.provisional.first_entry() {
            while let Some(&(r, key)) = stack.get().last() {
                if usable(entries, unlisted, protected, r, key) {
                    return Some((r, key));
                }
                stack.get_mut().pop();
            }
            stack.remove();
        }
        None
    }

    /// The exact set's smallest chunk not in `protected` above `after` (everything up to `after`
    /// having been evicted or protected).
    fn unlisted_victim(&self, protected: &[u32], after: Option<(Rank, u32)>) -> Option<(Rank, u32)> {
        let is_protected = |k: &u32| protected.binary_search(k).is_ok();
        let mut from = match after {
            Some(a) => self.unlisted.range((Excluded(a), Unbounded)),
            None => self.unlisted.range(..),
        };
        from.find(|(_, k)| !is_protected(k)).copied()
    }

    /// Evicts the `n` smallest-ranked ready chunks not in `protected` (sorted; at least `n` such
    /// are held). Each list's candidate stays its best until it is the one evicted: evicting
    /// another chunk changes no entry of it, and what passing over entries adds to the exact set
    /// is protected, so the set's candidate is searched from the last one it gave.
    fn evict_smallest(&mut self, n: usize, protected: &[u32]) {
        if n == 0 {
            return;
        }
        // Candidates packed as `(rank, key)` in one ordered word, [`NONE`] where a list offers
        // none: picking the smallest is three compares, not a search over tuples.
        let word = |c: Option<(Rank, u32)>| {
            c.map_or(NONE, |((major, pos), key)| (major as u128) << 64 | (pos as u128) << 32 | key as u128)
        };
        let mut fin = word(self.finished_victim(protected));
        let mut prov = word(self.provisional_victim(protected));
        let mut side = word(self.unlisted_victim(protected, None));
        for _ in 0..n {
            let best = fin.min(prov).min(side);
            assert!(best != NONE, "room was counted");
            let victim = (((best >> 64) as u64, (best >> 32) as u32), best as u32);
            self.entries.remove(&victim.1);
            self.ready -= 1;
            self.stats.evicted_chunks += 1;
            // Out of its list, and the list's next candidate.
            if best == fin {
                self.finished.pop_front();
                fin = word(self.finished_victim(protected));
            } else if best == prov {
                let mut stack = self.provisional.first_entry().expect("the victim's stack");
                stack.get_mut().pop();
                if stack.get().is_empty() {
                    stack.remove();
                }
                prov = word(self.provisional_victim(protected));
            } else {
                self.unlisted.remove(&victim);
                side = word(self.unlisted_victim(protected, Some(victim)));
            }
        }
    }

    /// Places the chunks `new` (none held; each a key and its position in a request ranked
    /// `major`) as being stored, evicting the shortfall by rank, never a chunk of `offered` (the
    /// whole store offer, held chunks included). `false`, changing nothing, when they do not all
    /// fit (`prepare_store`).
    pub fn store(&mut self, new: &[(u32, u32)], major: u64, offered: &[u32]) -> bool {
        let mut protected = std::mem::take(&mut self.protected);
        protected.clear();
        protected.extend(offered.iter().copied().filter(|&k| self.state(k) == Some(State::Ready)));
        let stored = self.store_protecting(new, major, &mut protected);
        self.protected = protected;
        stored
    }

    /// [`HostTier::store`] given the offer's chunks held and ready, `protected` (in any order;
    /// sorted here), as the offer's caller found them.
    pub fn store_protecting(&mut self, new: &[(u32, u32)], major: u64, protected: &mut [u32]) -> bool {
        if new.is_empty() {
            return true;
        }
        let free = self.capacity - self.entries.len();
        // The offer's chunks already held and ready: never evicted by it.
        if new.len() > free + self.ready - protected.len() {
            self.stats.refused_stores += 1;
            return false;
        }
        protected.sort_unstable();
        self.evict_smallest(new.len().saturating_sub(free), protected);
        let stack = self.provisional.entry(major).or_default();
        stack.reserve(new.len());
        for &(key, pos) in new {
            let r = rank(major, pos);
            // A stack holds positions in increasing order; an earlier position (a preempted
            // request storing again what was evicted) waits in the exact set once ready.
            let listed = stack.last().is_none_or(|&(top, _)| top > r);
            if listed {
                stack.push((r, key));
            }
            let previous = self.entries.insert(key, Entry::new(State::Storing, r, listed));
            debug_assert!(previous.is_none(), "a held chunk stored again");
        }
        self.stats.stored_chunks += new.len() as u64;
        self.stats.peak_chunks = self.stats.peak_chunks.max(self.entries.len() as u64);
        true
    }

    /// A request ranked `major` accessed `key`, its chunk at `pos` (a store offer or a load,
    /// `LRUCachePolicy.on_request_access`): a held chunk takes the rank `(major, −pos)` when that
    /// is above its own.
    pub fn raise(&mut self, key: u32, major: u64, pos: u32) {
        self.raise_all(&[(key, pos)], major);
    }

    /// [`HostTier::raise`] for each of `keys` (key, position) in order, the request's
    /// provisional stack found once.
    pub fn raise_all(&mut self, keys: &[(u32, u32)], major: u64) {
        let (entries, unlisted) = (&mut self.entries, &mut self.unlisted);
        let stack = self.provisional.entry(major).or_default();
        for &(key, pos) in keys {
            let r = rank(major, pos);
            let Some(e) = entries.get_mut(&key) else { continue };
            if e.rank() >= r {
                continue;
            }
            let listed = stack.last().is_none_or(|&(top, _)| top > r);
            if listed {
                stack.push((r, key));
            }
            let (old, ready) = (e.rank(), e.state() == State::Ready);
            if ready && !e.listed() {
                unlisted.remove(&(old, key));
            }
            if ready && !listed {
                unlisted.insert((r, key));
            }
            e.set_rank(r);
            e.set_listed(listed);
        }
        // No stack is kept empty (an access that raised nothing leaves none).
        if stack.is_empty() {
            self.provisional.remove(&major);
        }
    }

    /// `keys`' stores ended: they are readable (`complete_store`).
    pub fn stored(&mut self, keys: &[u32]) {
        for &key in keys {
            if let Some(e) = self.entries.get_mut(&key) {
                debug_assert_eq!(e.state(), State::Storing, "a chunk stored twice");
                e.set_state(State::Ready);
                let e = *e;
                self.now_ready(key, e);
            }
        }
    }

    /// A request ranked `major` (0: none) finished: each of its chunks `keys` (head first) that
    /// is held takes a fresh rank, tail to head (`on_request_finished`). `keys` holds every chunk
    /// the request stored or raised, so none of its provisional stack's entries stands any more:
    /// the stack goes whole, unread.
    pub fn finished(&mut self, keys: &[u32], major: u64) {
        let (entries, unlisted, queue) = (&mut self.entries, &mut self.unlisted, &mut self.finished);
        for &key in keys.iter().rev() {
            let Some(e) = entries.get_mut(&key) else { continue };
            if e.state() == State::Ready && !e.listed() {
                unlisted.remove(&(e.rank(), key));
            }
            self.next_rank += 1;
            let r = (self.next_rank, 0);
            debug_assert!(at_finish(r));
            queue.push_back((r, key));
            e.set_rank(r);
            e.set_listed(true);
        }
        if let Some(stack) = self.provisional.remove(&major) {
            debug_assert!(
                stack.iter().all(|&(r, k)| self.entries.get(&k).is_none_or(|e| e.rank() != r || !e.listed())),
                "a finished request's provisional entry still stands"
            );
        }
        // Entries passed over pile up in the finish queue: drop them when they outnumber the
        // chunks held.
        if self.finished.len() > 2 * self.entries.len() + 1024 {
            let entries = &self.entries;
            self.finished.retain(|&(r, key)| entries.get(&key).is_some_and(|e| e.rank() == r && e.listed()));
        }
    }

    /// Checks the tier's bookkeeping; panics when broken (tests).
    pub fn check_invariants(&self) {
        assert!(self.entries.len() <= self.capacity, "host tier over capacity");
        let ready = self.entries.values().filter(|e| e.state() == State::Ready).count();
        assert_eq!(ready, self.ready, "ready chunks counted");
        let unlisted: BTreeSet<(Rank, u32)> = self
            .entries
            .iter()
            .filter(|(_, e)| e.state() == State::Ready && !e.listed())
            .map(|(&k, e)| (e.rank(), k))
            .collect();
        assert_eq!(unlisted, self.unlisted, "the exact set != the ready chunks passed over");
        for (&k, e) in self.entries.iter().filter(|(_, e)| e.listed()) {
            let found = if at_finish(e.rank()) {
                self.finished.contains(&(e.rank(), k))
            } else {
                self.provisional.get(&e.rank().0).is_some_and(|s| s.contains(&(e.rank(), k)))
            };
            assert!(found, "a listed chunk {k} missing from its list");
        }
        for s in self.provisional.values() {
            assert!(s.windows(2).all(|w| w[0].0 > w[1].0), "a stack out of position order");
        }
    }
}

#[cfg(test)]
mod tests;
