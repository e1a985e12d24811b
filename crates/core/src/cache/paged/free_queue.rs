//! The paged pool's free queue (vLLM's `FreeKVCacheBlockQueue`): the front stack of released
//! blocks without a hash (vLLM 0.33's `BlockPool.free_blocks` prepends them), then the
//! never-used blocks in id order, then the ring of released blocks with tombstones; popping
//! evicts a cached block on the spot, releasing appends (or prepends), a cache hit takes a
//! block from the middle.

use super::*;

impl<W: IndexWord> PagedCache<W> {
    /// Length of the free queue (never-used + released blocks).
    pub fn free_len(&self) -> u64 {
        match self.num_blocks {
            Some(n) => (n - self.fresh_next) as u64 + self.list_len,
            None => u64::MAX,
        }
    }

    /// The free queue, head first (for tests; O(queue)). Unlimited pools keep no order: their
    /// released blocks come in id order.
    pub fn free_queue(&self) -> Vec<u32> {
        if self.num_blocks.is_none() {
            return (1..self.fresh_next).filter(|&b| self.blk[b as usize].queued()).collect();
        }
        let never_used = self.fresh_next..self.num_blocks.unwrap_or(self.fresh_next);
        self.front.iter().rev().copied().chain(never_used).chain(self.released()).collect()
    }

    /// Puts released blocks without a hash at the queue's front (`true`, vLLM 0.33) or every
    /// released block at its tail (`false`, before vLLM PR #42656).
    pub fn set_unhashed_first(&mut self, on: bool) {
        self.unhashed_first = on;
    }

    /// The blocks in the ring, head first.
    pub(super) fn released(&self) -> impl Iterator<Item = u32> + '_ {
        let mask = self.ring.len() as u32 - 1;
        let tickets = self.tail.wrapping_sub(self.head);
        (0..tickets).map(move |k| self.ring[(self.head.wrapping_add(k) & mask) as usize]).filter(|&b| b != GONE)
    }

    /// Whether popping `n` blocks now would evict one that `hit` marks (a peek: the front
    /// stack and the never-used blocks carry no hash, so only the ring's are looked at).
    pub(super) fn pop_would_evict(&self, n: usize, hit: impl Fn(u32) -> bool) -> bool {
        let never_used = self.num_blocks.map_or(n, |m| (m - self.fresh_next) as usize);
        let from_ring = n.saturating_sub(self.front.len() + never_used);
        from_ring > 0 && self.released().take(from_ring).any(hit)
    }

    /// Takes `b` out of the middle of the free queue.
    pub(super) fn unlink(&mut self, b: u32) {
        debug_assert_ne!(self.blk[b as usize].key, NO_KEY, "a block without a hash left the queue's middle");
        if self.num_blocks.is_some() {
            self.ring[(self.blk[b as usize].state & !IN_QUEUE) as usize] = GONE;
        }
        self.list_len -= 1;
    }

    /// Makes room for `n` more tickets in the ring: drops the `GONE` slots, and doubles the
    /// ring while it would be more than half full of blocks.
    #[cold]
    pub(super) fn make_room(&mut self, n: usize) {
        let live: Vec<u32> = self.released().collect();
        let mut size = self.ring.len();
        while 2 * (live.len() + n) > size {
            size *= 2;
        }
        // A slot must fit beside `IN_QUEUE`, below `FRONT_SLOT` (2^30 released blocks: far more
        // than memory holds).
        assert!(size <= (IN_QUEUE / 2) as usize, "free queue of more than 2^30 blocks");
        self.ring.clear();
        self.ring.resize(size, GONE);
        for (k, &b) in live.iter().enumerate() {
            self.ring[k] = b;
            self.blk[b as usize].state = IN_QUEUE | k as u32;
        }
        (self.head, self.tail) = (0, live.len() as u32);
    }

    /// Blocks referenced by requests.
    pub(super) fn in_use(&self) -> u64 {
        (self.fresh_next - 1) as u64 - self.list_len
    }

    /// Pops `n` blocks off the free-queue head into `out`, evicting cached ones; the caller
    /// checked `free_len`.
    #[inline]
    pub(super) fn pop_many(&mut self, n: usize, out: &mut Vec<u32>) {
        let n = if self.front.is_empty() { n } else { self.pop_front_stack(n, out) };
        self.pop_queue(n, out);
    }

    /// [`pop_many`](Self::pop_many) past the front stack: never-used blocks, then the ring (kept
    /// out of line: its code is what the tail-only order ran before the front stack existed).
    #[inline(never)]
    pub(super) fn pop_queue(&mut self, n: usize, out: &mut Vec<u32>) {
        out.reserve(n);
        let never_used = self.num_blocks.map_or(n, |m| (m - self.fresh_next) as usize);
        let fresh = n.min(never_used) as u32;
        out.extend(self.fresh_next..self.fresh_next + fresh);
        self.blk.resize(self.blk.len() + fresh as usize, Blk { state: 1, ..FRESH });
        self.fresh_next += fresh;
        let (mut head, mut evicted, mask) = (self.head, 0u64, self.ring.len() as u32 - 1);
        // Most evictions touch nothing but the block: no event to log, no duplicate carrying
        // its key, not a watched hit (the index entry is left stale, see `uncache`).
        let (quiet, gen) = (self.events.is_none(), self.watch_gen);
        let start = out.len();
        debug_assert!(self.list_len >= (n - fresh as usize) as u64, "pop from an empty free queue");
        out.resize(start + n - fresh as usize, 0);
        let mut i = start;
        while i < out.len() {
            let popped = pop_ring(&mut self.blk, &self.ring, head, mask, (quiet, gen), &mut out[i..]);
            (head, evicted, i) = (popped.head, evicted + popped.evicted, i + popped.done);
            if popped.slow {
                // `out[i]` left the ring but still carries its key: the whole eviction.
                let b = out[i];
                self.uncache(b);
                self.blk[b as usize].state = 1;
                (evicted, i) = (evicted + 1, i + 1);
            }
        }
        self.head = head;
        self.list_len -= (n - fresh as usize) as u64;
        self.cached_free -= evicted;
        self.stats.evicted_tokens += evicted * self.block as u64;
    }

    /// Pops up to `n` blocks off the front stack into `out` (blocks without a hash: nothing to
    /// evict); returns how many are still to pop.
    #[inline(never)]
    pub(super) fn pop_front_stack(&mut self, n: usize, out: &mut Vec<u32>) -> usize {
        let k = n.min(self.front.len());
        for b in self.front.drain(self.front.len() - k..).rev() {
            debug_assert_eq!(self.blk[b as usize].key, NO_KEY, "a hashed block on the front stack");
            self.blk[b as usize].state = 1;
            out.push(b);
        }
        self.list_len -= k as u64;
        n - k
    }

    /// Takes a reference on each of `blocks` (cached hits), taking free ones off the queue.
    pub(super) fn touch_all(&mut self, blocks: &[u32]) {
        for &b in blocks {
            if self.blk[b as usize].queued() {
                if self.is_watched(b) {
                    self.watch.as_mut().expect("watched block").evictable -= 1;
                }
                self.unlink(b);
                self.cached_free -= 1;
                self.blk[b as usize].state = 0;
            }
            self.blk[b as usize].state += 1;
        }
    }

    /// Drops a reference on each of `blocks`, in order; a block left without one joins the
    /// free-queue tail.
    pub(super) fn release_all(&mut self, blocks: impl ExactSizeIterator<Item = u32>) {
        let ordered = self.num_blocks.is_some();
        if ordered && self.tail.wrapping_sub(self.head) as usize + blocks.len() > self.ring.len() {
            self.make_room(blocks.len());
        }
        let (gen, mask) = (self.watch_gen, self.ring.len() as u32 - 1);
        let (tail, cached, watched) =
            release_ring(&mut self.blk, &mut self.ring, blocks, self.tail, mask, gen, ordered);
        self.list_len += tail.wrapping_sub(self.tail) as u64;
        self.tail = tail;
        self.cached_free += cached;
        if watched > 0 {
            self.watch.as_mut().expect("watched block").evictable += watched;
        }
    }

    /// Puts a request's unregistered blocks (`blocks`, in block-table order) at the front of the
    /// free queue, the last one at its head: vLLM's `prepend_n` of the blocks without a hash,
    /// the table freed last block first. They have no other reference (no hash, so no hit).
    pub(super) fn release_to_front(&mut self, blocks: &[u32]) {
        for &b in blocks {
            let r = &mut self.blk[b as usize];
            debug_assert!(r.state == 1 && r.key == NO_KEY, "an unregistered block with another reference");
            r.state = IN_QUEUE | FRONT_SLOT;
        }
        self.front.extend_from_slice(blocks);
        self.list_len += blocks.len() as u64;
    }
}

/// What [`pop_ring`] did: the ring's new head, the blocks it evicted and handed out, and
/// whether it stopped at a block needing the whole eviction ([`PagedCache::uncache`]), left in
/// the slot after the ones done.
struct Popped {
    head: u32,
    evicted: u64,
    done: usize,
    slow: bool,
}

/// Pops ring blocks into `out` from `head` (every one still in the ring), evicting those whose
/// eviction touches the block alone (`quiet`: no events kept; not stamped with the watch's
/// `gen`; no duplicate); stops after handing out a block that needs more. The loop over plain
/// slices keeps the pool's records and the ring in registers.
fn pop_ring(
    blk: &mut [Blk],
    ring: &[u32],
    mut head: u32,
    mask: u32,
    (quiet, gen): (bool, u16),
    out: &mut [u32],
) -> Popped {
    let mut evicted = 0;
    for (done, slot) in out.iter_mut().enumerate() {
        let b = loop {
            let b = ring[(head & mask) as usize];
            head = head.wrapping_add(1);
            if b != GONE {
                break b;
            }
        };
        *slot = b;
        let r = &mut blk[b as usize];
        if r.key != NO_KEY {
            if !(quiet && r.first && r.dup_next == NIL && r.watch_gen != gen) {
                return Popped { head, evicted, done, slow: true };
            }
            (r.key, r.first) = (NO_KEY, false);
            evicted += 1;
        }
        r.state = 1;
    }
    Popped { head, evicted, done: out.len(), slow: false }
}

/// Drops a reference on each of `blocks`, in order; a block left without one joins the ring at
/// `tail` (when `ordered`). Returns the new tail, and how many of the blocks queued are cached
/// and stamped with the watch's `gen`.
fn release_ring(
    blk: &mut [Blk],
    ring: &mut [u32],
    blocks: impl Iterator<Item = u32>,
    mut tail: u32,
    mask: u32,
    gen: u16,
    ordered: bool,
) -> (u32, u64, usize) {
    let (mut cached, mut watched) = (0u64, 0usize);
    for b in blocks {
        let r = &mut blk[b as usize];
        debug_assert!(!r.queued() && r.state > 0, "releasing a free block");
        r.state -= 1;
        if r.state == 0 {
            watched += (r.watch_gen == gen) as usize;
            cached += (r.key != NO_KEY) as u64;
            r.state = IN_QUEUE;
            if ordered {
                r.state |= tail & mask;
                ring[(tail & mask) as usize] = b;
            }
            tail = tail.wrapping_add(1);
        }
    }
    (tail, cached, watched)
}
