//! A compressed token radix tree as SGLang's `RadixCache` and LightLLM's prompt cache keep it
//! (ENGINE_SPEC §3.2, §4.4): node keys are runs of tokens (stored as views into the workload's
//! sequences, never copied); children are keyed by their first token, or first page when the
//! page size is above 1; partial matches split nodes; `lock_ref` protects paths; eviction takes
//! whole unlocked leaves in order of last access (ties: older node first) and re-queues parents
//! that become leaves. A logical clock stands for SGLang's monotonic time.
//!
//! Under a host tier ([`host`], SGLang's HiCache) a node may also hold a host copy, and a node
//! whose device copy was evicted stays in the tree on the host alone: matching walks through it,
//! the device counters and the device leaves (nodes with no child on the device) count device
//! copies only. Without a host tier every node is on the device and the rules above are all.

pub mod host;
pub mod mamba;
pub mod swa;

use crate::workload::{SeqId, TokenStore};
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;

/// Node handle.
pub type NodeId = u32;
/// The root node (empty key, always locked).
pub const ROOT: NodeId = 0;

#[derive(Debug, Clone)]
struct Node {
    parent: NodeId,
    seq: SeqId,
    off: u32,
    len: u32,
    /// Child key under the parent (first token, or fingerprint of the first page).
    key: u64,
    children: u32,
    lock_ref: u32,
    last_access: u64,
    alive: bool,
    /// Holds its KV on the device (always, without a host tier).
    device: bool,
    /// Holds a host copy (SGLang `backuped`).
    host: bool,
    /// Inserts that counted it (SGLang `hit_count`, the write-through trigger).
    hits: u32,
    /// Children on the device: a device leaf has none.
    device_children: u32,
    /// Its place among the tracked duplicates ([`RadixTree::dups`]); 0: not tracked.
    dup: u64,
    /// Brought back from the host by a load not acknowledged yet.
    loading: bool,
    /// Host locks (SGLang `host_lock_ref`): a storage tier's write or prefetch anchor in
    /// flight keeps the host copy out of host eviction.
    host_lock: u32,
}

/// Token radix tree with lock counts and LRU leaf eviction.
pub struct RadixTree {
    page: usize,
    nodes: Vec<Node>,
    free_nodes: Vec<NodeId>,
    children: FxHashMap<(NodeId, u64), NodeId>,
    /// Unlocked leaves by (last access, id): the eviction order.
    leaves: BTreeSet<(u64, NodeId)>,
    /// Host-only childless nodes by (last access, id): the host tier's eviction order.
    host_leaves: BTreeSet<(u64, NodeId)>,
    clock: u64,
    evictable: u64,
    protected: u64,
    /// Tokens with a host copy.
    host_tokens: u64,
    /// A host-only node kept out of host eviction while its run is loaded (`ROOT`: none).
    host_pin: NodeId,
    /// Write-back's duplicates: nodes whose KV became held on both tiers, in the order they did
    /// (`UnifiedTreeCore.full_host_duplicates`, entries left stale until a reclaim passes them);
    /// tracked only when `track_dups`.
    dups: std::collections::BTreeMap<u64, NodeId>,
    dup_clock: u64,
    track_dups: bool,
    /// SGLang's sliding-window component ([`swa`]); `None`: full attention only.
    swa: Option<Box<swa::Swa>>,
    /// SGLang's recurrent-state component ([`mamba`]); `None`: no linear-attention layers.
    mamba: Option<Box<mamba::Mamba>>,
}

/// What a lookup found: the device prefix and, past it, the run held on the host alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// Matched tokens on the device (page-aligned).
    pub device: usize,
    /// The node ending the device prefix.
    pub node: NodeId,
    /// Matched tokens past it held on the host alone.
    pub host: usize,
    /// The node ending the host run (`node` when there is none).
    pub host_node: NodeId,
}

impl RadixTree {
    /// An empty tree matching in units of `page` tokens.
    pub fn new(page: usize) -> Self {
        assert!((1..=crate::workload::tokens::MAX_BLOCK_TOKENS).contains(&page), "page size out of range");
        let root = Node {
            parent: ROOT,
            seq: 0,
            off: 0,
            len: 0,
            key: 0,
            children: 0,
            lock_ref: 1,
            last_access: 0,
            alive: true,
            device: true,
            host: true,
            hits: 0,
            device_children: 0,
            dup: 0,
            loading: false,
            host_lock: 0,
        };
        Self {
            page,
            nodes: vec![root],
            free_nodes: Vec::new(),
            children: FxHashMap::default(),
            leaves: BTreeSet::new(),
            host_leaves: BTreeSet::new(),
            clock: 0,
            evictable: 0,
            protected: 0,
            host_tokens: 0,
            host_pin: ROOT,
            dups: Default::default(),
            dup_clock: 0,
            track_dups: false,
            swa: None,
            mamba: None,
        }
    }

    /// Tokens in unlocked nodes (evictable).
    pub fn evictable_tokens(&self) -> u64 {
        self.evictable
    }

    /// Tokens in locked nodes.
    pub fn protected_tokens(&self) -> u64 {
        self.protected
    }

    /// Tokens with a host copy.
    pub fn host_tokens(&self) -> u64 {
        self.host_tokens
    }

    /// All tokens held by the tree on the device.
    pub fn size(&self) -> u64 {
        self.evictable + self.protected
    }

    /// Rounds a length down to whole pages.
    pub fn align(&self, len: usize) -> usize {
        len - len % self.page
    }

    fn child_key(&self, store: &TokenStore, seq: SeqId, pos: usize) -> u64 {
        if self.page == 1 {
            store.token(seq, pos) as u64
        } else {
            store.fingerprint(seq, pos, self.page)
        }
    }

    fn leaf_key(&self, n: NodeId) -> (u64, NodeId) {
        (self.nodes[n as usize].last_access, n)
    }

    /// A device leaf: on the device, unlocked, no child on the device.
    fn is_evictable_leaf(&self, n: NodeId) -> bool {
        let node = &self.nodes[n as usize];
        n != ROOT && node.alive && node.device && node.lock_ref == 0 && node.device_children == 0
    }

    /// A host leaf: on the host alone, unlocked, childless.
    fn is_host_leaf(&self, n: NodeId) -> bool {
        let node = &self.nodes[n as usize];
        n != ROOT
            && n != self.host_pin
            && node.alive
            && !node.device
            && node.host
            && node.lock_ref == 0
            && node.host_lock == 0
            && node.children == 0
    }

    fn set_access(&mut self, n: NodeId, t: u64) {
        let in_set = self.is_evictable_leaf(n);
        let in_host = !in_set && self.is_host_leaf(n);
        if in_set {
            self.leaves.remove(&self.leaf_key(n));
        }
        if in_host {
            self.host_leaves.remove(&self.leaf_key(n));
        }
        self.nodes[n as usize].last_access = t;
        if in_set {
            self.leaves.insert(self.leaf_key(n));
        }
        if in_host {
            self.host_leaves.insert(self.leaf_key(n));
        }
    }

    /// A fresh leaf of `len` tokens of `seq` from `off` under `parent` (its child at `key`),
    /// on the device or, `on_device` false, on the host alone; stamped after every stamp so far.
    fn new_leaf(&mut self, parent: NodeId, seq: SeqId, off: usize, len: usize, key: u64, on_device: bool) -> NodeId {
        let made = self.tick();
        let leaf = self.new_node(Node {
            parent,
            seq,
            off: off as u32,
            len: len as u32,
            key,
            children: 0,
            lock_ref: 0,
            last_access: made,
            alive: true,
            device: on_device,
            host: !on_device,
            hits: 0,
            device_children: 0,
            dup: 0,
            loading: false,
            host_lock: 0,
        });
        self.nodes[parent as usize].children += 1;
        self.children.insert((parent, key), leaf);
        leaf
    }

    fn new_node(&mut self, node: Node) -> NodeId {
        let id = match self.free_nodes.pop() {
            Some(id) => {
                self.nodes[id as usize] = node;
                id
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as NodeId
            }
        };
        if let Some(w) = self.swa.as_mut() {
            w.made(id);
        }
        if let Some(m) = self.mamba.as_mut() {
            m.made(id);
        }
        id
    }

    /// A fresh instant, later than every stamp so far: SGLang's `TreeNode()` takes
    /// `time.monotonic()` when it is made, after the `access_time` its caller stamps the path with.
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Splits `child` after `k` tokens; returns the new upper node, made now (`_split_node`).
    fn split(&mut self, store: &TokenStore, child: NodeId, k: usize) -> NodeId {
        let now = self.tick();
        let c = self.nodes[child as usize].clone();
        debug_assert!(k > 0 && k < c.len as usize && k.is_multiple_of(self.page));
        let upper = self.new_node(Node {
            parent: c.parent,
            seq: c.seq,
            off: c.off,
            len: k as u32,
            key: c.key,
            children: 1,
            lock_ref: c.lock_ref,
            last_access: now,
            alive: true,
            device: c.device,
            host: c.host,
            hits: c.hits,
            device_children: c.device as u32,
            dup: 0,
            loading: c.loading,
            // `_split_node` copies the host lock count to the upper part.
            host_lock: c.host_lock,
        });
        // A split's upper part is a duplicate of its own (`_split_node`).
        self.track_dup(upper);
        let lower_key = self.child_key(store, c.seq, c.off as usize + k);
        let cn = &mut self.nodes[child as usize];
        cn.parent = upper;
        cn.off += k as u32;
        cn.len -= k as u32;
        cn.key = lower_key;
        self.children.insert((c.parent, c.key), upper);
        self.children.insert((upper, lower_key), child);
        if let Some(w) = self.swa.as_mut() {
            w.split(upper, child);
        }
        if let Some(m) = self.mamba.as_mut() {
            m.split(upper);
        }
        upper
    }

    /// One step down from `node` at `seq[pos..len]`: the child whose key starts there and
    /// how many (page-aligned) tokens of it match.
    fn step(&self, store: &TokenStore, seq: SeqId, pos: usize, len: usize, node: NodeId) -> Option<(NodeId, usize)> {
        let child = *self.children.get(&(node, self.child_key(store, seq, pos)))?;
        let c = &self.nodes[child as usize];
        let same = self.align(store.lcp((seq, pos), (c.seq, c.off as usize), (c.len as usize).min(len - pos)));
        (same > 0).then_some((child, same))
    }

    /// Walks `seq[..len]` (page-aligned) from the root, splitting a partially matched node and
    /// stamping every visited node. Returns (matched tokens, last matched node).
    fn walk(&mut self, store: &TokenStore, seq: SeqId, len: usize) -> (usize, NodeId) {
        let len = self.align(len);
        let now = self.clock;
        let (mut node, mut pos) = (ROOT, 0);
        self.set_access(ROOT, now);
        while pos < len {
            let Some((child, same)) = self.step(store, seq, pos, len, node) else { break };
            pos += same;
            // SGLang stamps the child before it splits it (`_match_prefix_helper`,
            // `_insert_helper`), so the lower part of a split is as recent as the path.
            self.set_access(child, now);
            if same < self.nodes[child as usize].len as usize {
                node = self.split(store, child, same);
                break;
            }
            node = child;
        }
        (pos, node)
    }

    /// Longest prefix of `seq[..len]` (page-aligned) cached on the device, read-only.
    pub fn peek(&self, store: &TokenStore, seq: SeqId, len: usize) -> usize {
        let len = self.align(len);
        let (mut node, mut pos) = (ROOT, 0);
        while pos < len {
            let Some((child, same)) = self.step(store, seq, pos, len, node) else { break };
            if !self.nodes[child as usize].device {
                break;
            }
            pos += same;
            if same < self.nodes[child as usize].len as usize {
                break;
            }
            node = child;
        }
        pos
    }

    /// Tokens in node `n`'s key.
    fn len_of(&self, n: NodeId) -> usize {
        self.nodes[n as usize].len as usize
    }

    /// Stamps `node` and its ancestors as just used (`_match_post_processor`).
    fn stamp_path(&mut self, mut node: NodeId) {
        let now = self.tick();
        loop {
            self.set_access(node, now);
            if node == ROOT {
                break;
            }
            node = self.nodes[node as usize].parent;
        }
    }

    /// Tokens in unlocked nodes on the path from `node` up to the root: what locking `node`
    /// would move from evictable to protected.
    pub fn unlocked_above(&self, mut node: NodeId) -> u64 {
        let mut unlocked = 0;
        while node != ROOT {
            let n = &self.nodes[node as usize];
            if n.lock_ref == 0 {
                unlocked += n.len as u64;
            }
            node = n.parent;
        }
        unlocked
    }

    /// SGLang `match_prefix`: longest prefix of `seq[..len]` cached on the device, splitting a
    /// partially matched node and refreshing the access time of the path. Does not lock.
    pub fn match_prefix(&mut self, store: &TokenStore, seq: SeqId, len: usize) -> (usize, NodeId) {
        let f = self.match_tiers(store, seq, len);
        (f.device, f.node)
    }

    /// [`match_prefix`](Self::match_prefix) that also reports the run past the device prefix
    /// held on the host alone (SGLang `HiRadixCache.match_prefix`: `host_hit_length`,
    /// `last_host_node`): the walk goes through host-only nodes, stamping and splitting them too.
    pub fn match_tiers(&mut self, store: &TokenStore, seq: SeqId, len: usize) -> Found {
        self.clock += 1;
        let (pos, end) = self.walk(store, seq, len);
        let (mut node, mut device) = (end, pos);
        while !self.nodes[node as usize].device {
            device -= self.nodes[node as usize].len as usize;
            node = self.nodes[node as usize].parent;
        }
        Found { device, node, host: pos - device, host_node: end }
    }

    /// SGLang `insert`: adds `seq[..len]` (page-aligned). Returns the length that was already
    /// present on the device (whose slots the caller frees as duplicates) and the node ending
    /// the key. Nodes of the key held on the host alone take the caller's slots back onto the
    /// device (`_unevict_node_on_insert`).
    pub fn insert(&mut self, store: &TokenStore, seq: SeqId, len: usize) -> (usize, NodeId) {
        self.clock += 1;
        let len = self.align(len);
        let (found, node) = self.walk(store, seq, len);
        let present = self.revive_path(node, found);
        if found == len {
            return (present, node);
        }
        (present, self.add_device_leaf(store, seq, node, found, len))
    }

    /// A new unlocked device leaf under `node` holding `seq[from..to]` (`_add_new_node`).
    fn add_device_leaf(&mut self, store: &TokenStore, seq: SeqId, node: NodeId, from: usize, to: usize) -> NodeId {
        let key = self.child_key(store, seq, from);
        let was_leaf = self.is_evictable_leaf(node);
        let leaf = self.new_leaf(node, seq, from, to - from, key, true);
        if was_leaf {
            self.leaves.remove(&self.leaf_key(node));
        }
        self.nodes[node as usize].device_children += 1;
        self.leaves.insert(self.leaf_key(leaf));
        self.evictable += (to - from) as u64;
        leaf
    }

    /// Locks the path from `node` to the root.
    pub fn lock(&mut self, mut node: NodeId) {
        while node != ROOT {
            if self.nodes[node as usize].lock_ref == 0 {
                if self.is_evictable_leaf(node) {
                    self.leaves.remove(&self.leaf_key(node));
                }
                let len = self.nodes[node as usize].len as u64;
                self.evictable -= len;
                self.protected += len;
            }
            self.nodes[node as usize].lock_ref += 1;
            node = self.nodes[node as usize].parent;
        }
    }

    /// Unlocks the path from `node` to the root.
    pub fn unlock(&mut self, mut node: NodeId) {
        while node != ROOT {
            let n = &mut self.nodes[node as usize];
            debug_assert!(n.lock_ref > 0, "unlock of an unlocked node");
            n.lock_ref -= 1;
            if n.lock_ref == 0 {
                let len = n.len as u64;
                self.evictable += len;
                self.protected -= len;
                if self.is_evictable_leaf(node) {
                    self.leaves.insert(self.leaf_key(node));
                }
            }
            node = self.nodes[node as usize].parent;
        }
    }

    /// Evicts least-recently-used unlocked leaves until at least `tokens` are freed or none is
    /// left; whole nodes, so it may overshoot. Returns the tokens freed.
    pub fn evict(&mut self, tokens: u64) -> u64 {
        self.delete_leaves(false, tokens)
    }

    /// Deletes the least recently used leaves — device leaves, or host leaves (`host`) — until
    /// at least `tokens` are freed or none is left; returns the tokens freed.
    fn delete_leaves(&mut self, host: bool, tokens: u64) -> u64 {
        let mut freed = 0;
        while freed < tokens {
            let set = if host { &mut self.host_leaves } else { &mut self.leaves };
            let Some((_, n)) = set.pop_first() else { break };
            freed += self.nodes[n as usize].len as u64;
            self.delete(n);
        }
        freed
    }

    /// Removes childless node `n` (out of the leaf sets already) with its device and host
    /// copies, re-queuing its parent where it becomes a leaf of either kind.
    fn delete(&mut self, n: NodeId) {
        let node = self.nodes[n as usize].clone();
        debug_assert!(node.children == 0 && node.lock_ref == 0, "delete of a node in use");
        if node.device {
            self.evictable -= node.len as u64;
        }
        if node.host {
            self.host_tokens -= node.len as u64;
        }
        if node.dup != 0 {
            self.dups.remove(&node.dup);
        }
        if let Some(w) = self.swa.as_mut() {
            w.deleted(n, node.len as u64);
        }
        if let Some(m) = self.mamba.as_mut() {
            m.deleted(n);
        }
        self.children.remove(&(node.parent, node.key));
        self.nodes[n as usize].alive = false;
        self.free_nodes.push(n);
        let p = node.parent;
        let was_host_leaf = self.is_host_leaf(p);
        self.nodes[p as usize].children -= 1;
        if node.device {
            self.nodes[p as usize].device_children -= 1;
        }
        if self.is_evictable_leaf(p) {
            self.leaves.insert(self.leaf_key(p));
        }
        if !was_host_leaf && self.is_host_leaf(p) {
            self.host_leaves.insert(self.leaf_key(p));
        }
    }

    /// Debug check of the size counters and the leaf sets.
    pub fn check_invariants(&self) {
        let (mut ev, mut pr, mut host) = (0, 0, 0);
        let mut kids = vec![0u32; self.nodes.len()];
        let mut device_kids = vec![0u32; self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            if i == ROOT as usize || !n.alive {
                continue;
            }
            kids[n.parent as usize] += 1;
            assert!(n.device || n.host, "node {i} holds its KV nowhere");
            assert!(!n.device || self.nodes[n.parent as usize].device, "device node {i} under a host-only parent");
            if n.host {
                host += n.len as u64;
            }
            if !n.device {
                assert_eq!(n.lock_ref, 0, "locked host-only node {i}");
                continue;
            }
            device_kids[n.parent as usize] += 1;
            if n.lock_ref == 0 {
                ev += n.len as u64;
            } else {
                pr += n.len as u64;
                assert!(self.nodes[n.parent as usize].lock_ref > 0, "locked node under an unlocked parent");
            }
        }
        assert_eq!((ev, pr), (self.evictable, self.protected), "tree size counters");
        assert_eq!(host, self.host_tokens, "host token counter");
        for (i, n) in self.nodes.iter().enumerate() {
            if n.alive {
                assert_eq!(kids[i], n.children, "child count of node {i}");
                assert_eq!(device_kids[i], n.device_children, "device child count of node {i}");
                let leaf = self.is_evictable_leaf(i as NodeId);
                assert_eq!(leaf, self.leaves.contains(&(n.last_access, i as NodeId)), "leaf set membership of {i}");
                let host_leaf = self.is_host_leaf(i as NodeId);
                assert_eq!(host_leaf, self.host_leaves.contains(&(n.last_access, i as NodeId)), "host leaf set of {i}");
            }
        }
        assert_eq!(self.children.len(), self.nodes.iter().skip(1).filter(|n| n.alive).count(), "child map size");
        for (&seq, &n) in &self.dups {
            let node = &self.nodes[n as usize];
            assert!(node.alive && node.dup == seq, "duplicate entry {seq} for node {n}");
        }
        self.check_swa();
        self.check_mamba();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(seqs: &[&[u32]]) -> TokenStore {
        TokenStore::from_seqs(seqs)
    }

    /// ENGINE_SPEC §3.10: SGLang's own radix_cache self-test.
    #[test]
    fn sglang_self_test_vector() {
        let s = store(&[
            &[1, 2, 3],
            &[1, 2, 3],
            &[1, 2, 4, 5],
            &[1, 2, 4, 5, 6, 7],
            &[8, 9, 10, 11, 12],
            &[1, 2, 3, 13, 14],
        ]);
        let mut t = RadixTree::new(1);
        assert_eq!(t.insert(&s, 0, 3).0, 0);
        assert_eq!(t.insert(&s, 1, 3).0, 3);
        assert_eq!(t.insert(&s, 2, 4).0, 2);
        assert_eq!(t.insert(&s, 3, 6).0, 4);
        assert_eq!(t.insert(&s, 4, 5).0, 0);
        assert_eq!(t.evictable_tokens(), 12);
        let (m, node) = t.match_prefix(&s, 5, 5);
        assert_eq!(m, 3);
        assert_eq!(t.nodes[node as usize].len, 1); // node [3]
        assert_eq!(t.peek(&s, 3, 6), 6);
        // Structure: root → [1,2] → {[3], [4,5] → [6,7]}; root → [8..12].
        let lens: Vec<u32> = t.nodes.iter().skip(1).filter(|n| n.alive).map(|n| n.len).collect();
        let mut sorted = lens.clone();
        sorted.sort();
        assert_eq!(sorted, vec![1, 2, 2, 2, 5]);
        t.check_invariants();
    }

    #[test]
    fn lru_eviction_of_leaves_and_parents() {
        let s = store(&[&[1, 2, 3, 4], &[1, 2, 7, 8], &[9, 9]]);
        let mut t = RadixTree::new(1);
        t.insert(&s, 0, 4);
        t.insert(&s, 1, 4); // splits [1,2,3,4] → [1,2] + {[3,4], [7,8]}
        t.insert(&s, 2, 2);
        t.match_prefix(&s, 0, 4); // refresh [1,2] and [3,4]
                                  // Oldest leaf is [7,8], then [9,9], then [3,4], then [1,2] once childless.
        assert_eq!(t.evict(1), 2);
        assert_eq!(t.peek(&s, 1, 4), 2);
        assert_eq!(t.evict(3), 4); // [9,9] then [3,4]
        assert_eq!(t.size(), 2);
        t.check_invariants();
        assert_eq!(t.evict(100), 2);
        assert_eq!(t.size(), 0);
        t.check_invariants();
    }

    #[test]
    fn locked_paths_are_never_evicted() {
        let s = store(&[&[1, 2, 3, 4], &[1, 2, 7, 8]]);
        let mut t = RadixTree::new(1);
        let (_, a) = t.insert(&s, 0, 4);
        t.lock(a);
        t.insert(&s, 1, 4);
        assert_eq!(t.protected_tokens(), 4);
        assert_eq!(t.evict(100), 2);
        assert_eq!(t.peek(&s, 0, 4), 4);
        t.unlock(a);
        t.check_invariants();
        assert_eq!(t.evict(100), 4);
    }

    #[test]
    fn pages_align_matches_and_inserts() {
        let s = store(&[&[1, 2, 3, 4, 5, 6, 7], &[1, 2, 3, 9, 9, 9]]);
        let mut t = RadixTree::new(2);
        assert_eq!(t.insert(&s, 0, 7), (0, 1));
        assert_eq!(t.size(), 6);
        assert_eq!(t.peek(&s, 1, 6), 2); // [1,2] matches, page [3,9] differs from [3,4]
        let (m, _) = t.match_prefix(&s, 1, 6);
        assert_eq!(m, 2);
        t.check_invariants();
    }
}
