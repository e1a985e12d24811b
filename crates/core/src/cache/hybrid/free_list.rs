//! vLLM's `FreeKVCacheBlockQueue` (`vllm/v1/core/kv_cache_utils.py`, 0.33.0): a doubly linked
//! list of block ids in eviction order, head first. Allocation pops the head; a prefix hit takes
//! its block out of the middle; released blocks go to the tail (`append_n`) or, as one run in
//! their given order, to the head (`prepend_n`). Links live in two plain vectors indexed by
//! block id, so every operation is O(1) and nothing is allocated per block.

/// No block (the list's ends).
const NIL: u32 = u32::MAX;

/// The free queue of a block pool; block ids are `1..`: block 0, vLLM's null block, is never
/// queued.
#[derive(Debug, Default)]
pub struct FreeList {
    prev: Vec<u32>,
    next: Vec<u32>,
    /// Whether each block is queued now.
    queued: Vec<bool>,
    head: u32,
    tail: u32,
    len: usize,
}

impl FreeList {
    /// An empty queue.
    pub fn new() -> Self {
        Self { head: NIL, tail: NIL, ..Self::default() }
    }

    fn fit(&mut self, b: u32) {
        let n = b as usize + 1;
        if self.queued.len() < n {
            self.prev.resize(n, NIL);
            self.next.resize(n, NIL);
            self.queued.resize(n, false);
        }
    }

    /// Blocks queued.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no block is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether block `b` is queued.
    pub fn contains(&self, b: u32) -> bool {
        self.queued.get(b as usize).copied().unwrap_or(false)
    }

    /// Puts `b` at the tail.
    pub fn push_back(&mut self, b: u32) {
        self.fit(b);
        debug_assert!(!self.queued[b as usize], "block {b} queued twice");
        self.queued[b as usize] = true;
        self.prev[b as usize] = self.tail;
        self.next[b as usize] = NIL;
        match self.tail {
            NIL => self.head = b,
            t => self.next[t as usize] = b,
        }
        self.tail = b;
        self.len += 1;
    }

    /// Puts `blocks` at the head, in their order (the first becomes the head): `prepend_n`.
    pub fn prepend(&mut self, blocks: &[u32]) {
        for &b in blocks.iter().rev() {
            self.fit(b);
            debug_assert!(!self.queued[b as usize], "block {b} queued twice");
            self.queued[b as usize] = true;
            self.next[b as usize] = self.head;
            self.prev[b as usize] = NIL;
            match self.head {
                NIL => self.tail = b,
                h => self.prev[h as usize] = b,
            }
            self.head = b;
            self.len += 1;
        }
    }

    /// Takes the head out (`popleft`).
    pub fn pop_front(&mut self) -> Option<u32> {
        let b = self.head;
        if b == NIL {
            return None;
        }
        self.remove(b);
        Some(b)
    }

    /// Takes `b` out from wherever it is (`remove`): a prefix hit on a free block.
    pub fn remove(&mut self, b: u32) {
        debug_assert!(self.contains(b), "block {b} is not queued");
        let (p, n) = (self.prev[b as usize], self.next[b as usize]);
        match p {
            NIL => self.head = n,
            p => self.next[p as usize] = n,
        }
        match n {
            NIL => self.tail = p,
            n => self.prev[n as usize] = p,
        }
        self.queued[b as usize] = false;
        self.len -= 1;
    }

    /// The queue, head first (for tests and invariant checks).
    pub fn to_vec(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len);
        let mut b = self.head;
        while b != NIL {
            out.push(b);
            b = self.next[b as usize];
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::FreeList;

    #[test]
    fn pops_head_first_and_takes_hits_from_the_middle() {
        let mut q = FreeList::new();
        for b in 1..=5 {
            q.push_back(b);
        }
        q.remove(3);
        q.prepend(&[9, 8]);
        assert_eq!(q.to_vec(), vec![9, 8, 1, 2, 4, 5]);
        assert_eq!(q.pop_front(), Some(9));
        q.remove(5);
        q.push_back(3);
        assert_eq!(q.to_vec(), vec![8, 1, 2, 4, 3]);
        assert_eq!(q.len(), 5);
        assert!(!q.contains(9) && q.contains(3));
        while q.pop_front().is_some() {}
        assert!(q.is_empty() && q.to_vec().is_empty());
    }
}
