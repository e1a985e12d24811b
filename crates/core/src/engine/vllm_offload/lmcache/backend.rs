//! One storage backend of LMCache — the local CPU one (`storage_backend/local_cpu_backend.py`) or
//! the local disk one (`storage_backend/local_disk_backend.py`), both LMCache 0.5.6: a fixed
//! number of chunk slots, the held chunks keyed by their prefix in least-recently-used order
//! (`storage_backend/cache_policy/lru.py`), each with a pin count; eviction takes the least recent
//! unpinned chunk. A slot is taken before its chunk is put (LMCache allocates, copies, then puts),
//! so a slot can be held by a chunk on its way in, neither listed nor evictable.

use crate::cache::lru::{LruList, NIL};
use rustc_hash::FxHashMap;

/// A slot: the key it holds and the pins on it.
#[derive(Debug, Clone, Copy)]
struct Slot {
    key: u32,
    pins: u32,
}

/// The backend's slots and their order.
#[derive(Debug)]
pub struct Backend {
    capacity: u64,
    /// Held chunks: key → slot.
    held: FxHashMap<u32, u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Held slots, most recent first.
    lru: LruList,
    /// Chunks evicted, most held at once.
    pub evicted: u64,
    pub peak: u64,
}

impl Backend {
    /// An empty backend of `capacity` slots.
    pub fn new(capacity: u64) -> Self {
        Self {
            capacity,
            held: FxHashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            lru: LruList::new(0),
            evicted: 0,
            peak: 0,
        }
    }

    pub fn contains(&self, key: u32) -> bool {
        self.held.contains_key(&key)
    }

    /// Chunks held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Pins held chunk `key` (a lookup's hit, or a copy reading it).
    pub fn pin(&mut self, key: u32) {
        let s = self.held[&key];
        self.slots[s as usize].pins += 1;
    }

    /// Releases a pin of held chunk `key`.
    pub fn unpin(&mut self, key: u32) {
        let s = self.held[&key];
        debug_assert!(self.slots[s as usize].pins > 0, "a chunk unpinned more than pinned");
        self.slots[s as usize].pins -= 1;
    }

    /// Moves held chunk `key` to the most recent end (`update_on_hit`).
    pub fn touch(&mut self, key: u32) {
        let s = self.held[&key];
        self.lru.unlink(s);
        self.lru.link_mru(s);
    }

    /// A slot for a chunk on its way in: a free one, else the least recent unpinned chunk's
    /// (evicted), else none.
    pub fn take_slot(&mut self) -> Option<u32> {
        if let Some(s) = self.free.pop() {
            return Some(s);
        }
        if (self.slots.len() as u64) < self.capacity {
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
        self.evicted += 1;
        Some(s)
    }

    /// Puts `key` in slot `s` (taken by [`Backend::take_slot`]) at the most recent end; a key
    /// held already gives the slot back and keeps its place (`submit_put_task`). Whether it was
    /// put.
    pub fn put(&mut self, s: u32, key: u32) -> bool {
        if self.held.contains_key(&key) {
            self.free.push(s);
            return false;
        }
        self.slots[s as usize] = Slot { key, pins: 0 };
        self.held.insert(key, s);
        self.lru.link_mru(s);
        self.peak = self.peak.max(self.held.len() as u64);
        true
    }

    /// Pins on held chunks, all together.
    pub fn pins(&self) -> u64 {
        self.held.values().map(|&s| self.slots[s as usize].pins as u64).sum()
    }

    /// Gives slot `s` back unused.
    pub fn give_back(&mut self, s: u32) {
        self.free.push(s);
    }

    /// The held keys, most recent first (tests).
    #[cfg(test)]
    pub fn order(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut s = self.lru.mru();
        while s != NIL {
            out.push(self.slots[s as usize].key);
            s = self.lru.older(s);
        }
        out
    }

    /// Slots given back and not reused (tests).
    #[cfg(test)]
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }

    /// Checks the bookkeeping; `in_use` slots are held by chunks on their way in. Panics when
    /// broken (tests).
    pub fn check_invariants(&self, in_use: usize) {
        assert!(self.slots.len() as u64 <= self.capacity, "over capacity");
        assert_eq!(self.held.len() + self.free.len() + in_use, self.slots.len(), "a slot lost");
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
