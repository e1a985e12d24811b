//! The radix tree's host tier, node by node, as SGLang 0.5.23's HiCache keeps it
//! (`mem_cache/unified_radix_cache.py` `UnifiedRadixCache`, `mem_cache/unified_cache/
//! unified_tree_core.py` `UnifiedTreeCore`): a node's host copy (`backuped`), the device copy
//! of a backed node given up while the node stays matchable on the host (`_demote`), a node
//! held on the host alone taking a request's fresh KV back onto the device on insert
//! (`_unevict_node_on_insert`), the loads that bring a host run back (`commit_load_back`),
//! host-only childless nodes evicted oldest first (`drive_host_eviction`, `_evict_host_leaf`),
//! and the hit counts that trigger a write (`_inc_hit_count_and_check`). What is copied when,
//! and what the copies cost, is the caller's ([`crate::cache::hicache`]).

use super::{NodeId, RadixTree, ROOT};

impl RadixTree {
    /// Takes `n` out of both leaf sets (keyed by its access time), for a change of its state.
    fn unqueue(&mut self, n: NodeId) {
        let key = self.leaf_key(n);
        self.leaves.remove(&key);
        self.host_leaves.remove(&key);
    }

    /// Puts `n` back into the leaf set its state now calls for.
    fn requeue(&mut self, n: NodeId) {
        if self.is_evictable_leaf(n) {
            self.leaves.insert(self.leaf_key(n));
        } else if self.is_host_leaf(n) {
            self.host_leaves.insert(self.leaf_key(n));
        }
    }

    /// Moves unlocked node `n`'s KV onto the device (`on`) or off it.
    fn set_device(&mut self, n: NodeId, on: bool) {
        let p = self.nodes[n as usize].parent;
        debug_assert!(self.nodes[n as usize].device != on && self.nodes[n as usize].lock_ref == 0);
        self.unqueue(n);
        self.unqueue(p);
        let len = self.nodes[n as usize].len as u64;
        self.nodes[n as usize].device = on;
        if on {
            self.evictable += len;
            self.nodes[p as usize].device_children += 1;
        } else {
            self.evictable -= len;
            self.nodes[p as usize].device_children -= 1;
        }
        self.requeue(n);
        self.requeue(p);
    }

    /// Records or drops node `n`'s host copy.
    fn set_host(&mut self, n: NodeId, on: bool) {
        debug_assert!(self.nodes[n as usize].host != on);
        self.unqueue(n);
        let len = self.nodes[n as usize].len as u64;
        self.nodes[n as usize].host = on;
        if on {
            self.host_tokens += len;
        } else {
            self.host_tokens -= len;
        }
        self.requeue(n);
    }

    /// Brings the host-only nodes ending the path at `node` (which matched `found` tokens)
    /// back onto the device with the inserting request's KV; returns the tokens of the path
    /// that were on the device before. Each becomes a duplicate, top down, as the insert's walk
    /// meets it.
    pub(super) fn revive_path(&mut self, node: NodeId, found: usize) -> usize {
        let (mut n, mut device) = (node, found);
        let mut top = ROOT;
        while !self.nodes[n as usize].device {
            device -= self.nodes[n as usize].len as usize;
            self.set_device(n, true);
            top = n;
            n = self.nodes[n as usize].parent;
        }
        if self.track_dups && top != ROOT {
            let mut run = Vec::new();
            let mut x = node;
            while x != n {
                run.push(x);
                x = self.nodes[x as usize].parent;
            }
            for &x in run.iter().rev() {
                self.track_dup(x);
            }
        }
        device
    }

    /// Tracks write-back's duplicates from now on ([`reclaim_duplicates`](Self::reclaim_duplicates)).
    pub fn track_duplicates(&mut self) {
        self.track_dups = true;
    }

    /// Registers node `n` as a duplicate if it is one — on both tiers, no load in flight — keeping
    /// the place of an entry it already has (`_update_duplicate_tracking`).
    pub(super) fn track_dup(&mut self, n: NodeId) {
        let node = &self.nodes[n as usize];
        if !self.track_dups || node.dup != 0 || !(node.device && node.host && !node.loading) {
            return;
        }
        self.dup_clock += 1;
        self.nodes[n as usize].dup = self.dup_clock;
        self.dups.insert(self.dup_clock, n);
    }

    /// Under write-back, host pressure first frees the host copies of nodes also on the device,
    /// in the order they became duplicates, sparing device leaves (about to give up their
    /// device copy) in a first pass and taking them in a second, until `tokens` are freed
    /// (`_reclaim_full_host_duplicates`); the entries passed on the way, stale or freed, are
    /// dropped. Returns the host tokens freed.
    pub fn reclaim_duplicates(&mut self, tokens: u64) -> u64 {
        let mut freed = 0;
        let mut swept: Vec<u64> = Vec::new();
        for spare_leaves in [true, false] {
            if freed >= tokens {
                break;
            }
            let entries: Vec<(u64, NodeId)> = self.dups.iter().map(|(&s, &n)| (s, n)).collect();
            for (seq, n) in entries {
                if freed >= tokens {
                    break;
                }
                let node = &self.nodes[n as usize];
                if !(node.device && node.host) {
                    swept.push(seq);
                    continue;
                }
                if spare_leaves && self.is_evictable_leaf(n) || node.loading || node.host_lock > 0 {
                    continue;
                }
                freed += node.len as u64;
                self.set_host(n, false);
                swept.push(seq);
            }
        }
        for seq in swept {
            if let Some(n) = self.dups.remove(&seq) {
                self.nodes[n as usize].dup = 0;
            }
        }
        freed
    }

    /// Whether node `n` holds a host copy.
    pub fn has_host_copy(&self, n: NodeId) -> bool {
        self.nodes[n as usize].host
    }

    /// Host-locks node `n` alone (`inc_host_lock_ref`: only the node, not its path).
    pub fn host_lock(&mut self, n: NodeId) {
        self.unqueue(n);
        self.nodes[n as usize].host_lock += 1;
        self.requeue(n);
    }

    /// Ends one [`host_lock`](Self::host_lock) of `n`, if it is still alive and locked.
    pub fn host_unlock(&mut self, n: NodeId) {
        let node = &self.nodes[n as usize];
        if !node.alive || node.host_lock == 0 {
            return;
        }
        self.unqueue(n);
        self.nodes[n as usize].host_lock -= 1;
        self.requeue(n);
    }

    /// Whether node `n` is in the tree (ids of deleted nodes are reused).
    pub fn is_alive(&self, n: NodeId) -> bool {
        self.nodes[n as usize].alive
    }

    /// Node `n`'s parent.
    pub fn parent(&self, n: NodeId) -> NodeId {
        self.nodes[n as usize].parent
    }

    /// Whether `n` is the root.
    pub fn is_root(&self, n: NodeId) -> bool {
        n == ROOT
    }

    /// The tokens node `n` holds, as a view: (sequence, offset, length); the sequence's first
    /// `offset` tokens are the path above it.
    pub fn node_span(&self, n: NodeId) -> (crate::workload::SeqId, usize, usize) {
        let node = &self.nodes[n as usize];
        (node.seq, node.off as usize, node.len as usize)
    }

    /// Inserts `seq[from..to]` (page-aligned), read from a storage tier into host slots, as
    /// host-only nodes under `anchor`, which ends at `from` (`UnifiedTreeCore.insert_host`):
    /// the walk down from the anchor stamps each node it meets, splitting one matched in part;
    /// under write-through (`refill`) a met node without a host copy takes the read copy, one
    /// with a host copy keeps its own (its tokens counted in the prefix freed); under write-back
    /// every met token is freed. The rest becomes one new host-only leaf — unless the node it
    /// would hang under has no host copy under write-through (the read is dropped). Returns
    /// (tokens of the read already present, whose slots the caller frees; tokens that became
    /// host copies in the tree; dropped).
    pub fn insert_host(
        &mut self,
        store: &crate::workload::TokenStore,
        anchor: NodeId,
        seq: crate::workload::SeqId,
        from: usize,
        to: usize,
        refill: bool,
    ) -> (usize, usize, bool) {
        self.clock += 1;
        let now = self.clock;
        self.set_access(anchor, now);
        let (mut node, mut pos) = (anchor, from);
        let (mut present, mut taken, mut matched) = (0, 0, 0);
        while pos < to {
            let Some((child, same)) = self.step(store, seq, pos, to, node) else { break };
            self.set_access(child, now);
            let n = if same < self.nodes[child as usize].len as usize { self.split(store, child, same) } else { child };
            pos += same;
            matched += same;
            node = n;
            if refill {
                if self.nodes[n as usize].host {
                    present += same;
                } else {
                    self.set_host(n, true);
                    taken += same;
                }
            }
        }
        if !refill {
            present = matched;
        }
        if pos == to {
            return (present, taken, false);
        }
        if refill && node != ROOT && !self.nodes[node as usize].host {
            return (present, taken, true);
        }
        let key = self.child_key(store, seq, pos);
        self.unqueue(node);
        let leaf = self.new_leaf(node, seq, pos, to - pos, key, false);
        self.host_tokens += (to - pos) as u64;
        self.requeue(node);
        self.requeue(leaf);
        taken += to - pos;
        (present, taken, false)
    }

    /// Tokens of node `n`.
    pub fn node_len(&self, n: NodeId) -> usize {
        self.nodes[n as usize].len as usize
    }

    /// The nodes on the path ending at `node`, root excluded, top down, each with the offset
    /// its key ends at.
    pub fn path(&self, mut node: NodeId, out: &mut Vec<(NodeId, usize)>) {
        out.clear();
        let mut end: usize = 0;
        let mut n = node;
        while n != ROOT {
            end += self.nodes[n as usize].len as usize;
            n = self.nodes[n as usize].parent;
        }
        while node != ROOT {
            out.push((node, end));
            end -= self.nodes[node as usize].len as usize;
            node = self.nodes[node as usize].parent;
        }
        out.reverse();
    }

    /// Counts an insert's pass through device node `n` (`hit_count += 1`); whether it has
    /// now been counted `threshold` times without a host copy (a write is due).
    pub fn count_hit(&mut self, n: NodeId, threshold: u32) -> bool {
        let node = &mut self.nodes[n as usize];
        debug_assert!(node.device);
        node.hits += 1;
        !node.host && node.hits >= threshold
    }

    /// The nodes a write of `n` covers, ancestors first: `n` and the run of ancestors without
    /// a host copy above it (`_build_backup_kv_action`: write-through keeps every backed node's
    /// ancestors backed).
    pub fn backup_chain(&self, n: NodeId, out: &mut Vec<NodeId>) {
        out.clear();
        out.push(n);
        let mut a = self.nodes[n as usize].parent;
        while a != ROOT && !self.nodes[a as usize].host {
            out.push(a);
            a = self.nodes[a as usize].parent;
        }
        out.reverse();
    }

    /// Marks node `n`'s host copy made (its tokens now held on the host too); `acked`: the copy
    /// is acknowledged at once (write-back waits for it), so the node is a duplicate now.
    pub fn backed_up(&mut self, n: NodeId, acked: bool) {
        self.set_host(n, true);
        if acked {
            self.track_dup(n);
        }
    }

    /// The least recently used device leaf, taken out of the eviction order, or `None`.
    pub fn pop_device_leaf(&mut self) -> Option<NodeId> {
        self.leaves.pop_first().map(|(_, n)| n)
    }

    /// Gives up device leaf `n`'s device copy (taken by [`pop_device_leaf`](Self::pop_device_leaf)),
    /// keeping its host copy (`_demote`); returns its tokens.
    pub fn demote(&mut self, n: NodeId) -> u64 {
        debug_assert!(self.nodes[n as usize].host);
        self.set_device(n, false);
        self.nodes[n as usize].len as u64
    }

    /// Deletes device leaf `n` (taken by [`pop_device_leaf`](Self::pop_device_leaf)) with
    /// whatever hangs below it on the host alone (`_delete_unbacked_device_leaf`,
    /// `drop_subtree_no_host`); returns (device tokens, host tokens) freed.
    pub fn drop_subtree(&mut self, n: NodeId) -> (u64, u64) {
        let mut host = 0;
        if self.nodes[n as usize].children > 0 {
            // Only below a node never written back (write-back's fallback): rare, so a scan.
            let mut below: Vec<NodeId> = Vec::new();
            let mut stack = vec![n];
            while let Some(x) = stack.pop() {
                for (i, c) in self.nodes.iter().enumerate() {
                    if c.alive && c.parent == x && i as NodeId != ROOT {
                        stack.push(i as NodeId);
                        below.push(i as NodeId);
                    }
                }
            }
            // Deepest first, so each is childless when deleted.
            for &x in below.iter().rev() {
                self.unqueue(x);
                host += self.nodes[x as usize].len as u64;
                self.delete(x);
            }
        }
        self.unqueue(n);
        let node = &self.nodes[n as usize];
        let device = node.len as u64;
        if node.host {
            host += device;
        }
        self.delete(n);
        (device, host)
    }

    /// Evicts host-only childless nodes, least recently used first, until at least `tokens`
    /// host tokens are freed or none is left (`drive_host_eviction`); returns the tokens freed.
    pub fn evict_host(&mut self, tokens: u64) -> u64 {
        self.delete_leaves(true, tokens)
    }

    /// Keeps host-only node `n` out of host eviction until [`unpin_host`](Self::unpin_host)
    /// (SGLang locks a run's host copy while its load is prepared).
    pub fn pin_host(&mut self, n: NodeId) {
        self.unqueue(n);
        self.host_pin = n;
    }

    /// Ends [`pin_host`](Self::pin_host).
    pub fn unpin_host(&mut self, n: NodeId) {
        self.host_pin = ROOT;
        self.requeue(n);
    }

    /// Brings the host-only run ending at `host_node` back onto the device
    /// (`commit_load_back`); returns its tokens. The caller has made the device room.
    pub fn load_back(&mut self, host_node: NodeId) -> u64 {
        let mut n = host_node;
        let mut loaded = 0;
        while !self.nodes[n as usize].device {
            loaded += self.nodes[n as usize].len as u64;
            self.set_device(n, true);
            self.nodes[n as usize].loading = true;
            n = self.nodes[n as usize].parent;
        }
        loaded
    }

    /// The load of the run ending at `anchor` is acknowledged (`finish_load_back`): its nodes,
    /// deepest first, are settled duplicates.
    pub fn load_acknowledged(&mut self, anchor: NodeId) {
        let mut n = anchor;
        while n != ROOT && self.nodes[n as usize].loading {
            self.nodes[n as usize].loading = false;
            self.track_dup(n);
            n = self.nodes[n as usize].parent;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::TokenStore;

    fn store(seqs: &[&[u32]]) -> TokenStore {
        TokenStore::from_seqs(seqs)
    }

    #[test]
    fn a_demoted_node_stays_matchable_on_the_host_and_comes_back() {
        let s = store(&[&[1, 2, 3, 4], &[1, 2, 3, 4, 5]]);
        let mut t = RadixTree::new(1);
        let (_, a) = t.insert(&s, 0, 4);
        t.backed_up(a, false);
        assert_eq!(t.host_tokens(), 4);
        let leaf = t.pop_device_leaf().expect("a device leaf");
        assert_eq!(leaf, a);
        assert_eq!(t.demote(a), 4);
        t.check_invariants();
        assert_eq!(t.size(), 0);
        assert_eq!(t.peek(&s, 1, 5), 0, "routers see the device alone");
        let f = t.match_tiers(&s, 1, 4);
        assert_eq!((f.device, f.host, f.node, f.host_node), (0, 4, ROOT, a));
        assert_eq!(t.load_back(f.host_node), 4);
        assert_eq!(t.size(), 4);
        t.check_invariants();
    }

    #[test]
    fn an_insert_through_a_host_only_node_takes_the_fresh_kv() {
        let s = store(&[&[1, 2, 3, 4], &[1, 2, 3, 4, 5, 6]]);
        let mut t = RadixTree::new(1);
        let (_, a) = t.insert(&s, 0, 4);
        t.backed_up(a, false);
        t.pop_device_leaf();
        t.demote(a);
        // Nothing was on the device: no duplicate to free; the host-only node is revived.
        let (present, leaf) = t.insert(&s, 1, 6);
        assert_eq!(present, 0);
        assert_eq!(t.size(), 6);
        assert_eq!(t.node_len(leaf), 2);
        t.check_invariants();
    }

    #[test]
    fn host_eviction_takes_host_only_leaves_oldest_first_then_their_parents() {
        let s = store(&[&[1, 2, 3, 4], &[1, 2, 7, 8], &[9, 9]]);
        let mut t = RadixTree::new(1);
        t.insert(&s, 0, 4);
        t.insert(&s, 1, 4);
        t.insert(&s, 2, 2);
        let mut chain = Vec::new();
        let (_, n34) = t.match_prefix(&s, 0, 4);
        t.backup_chain(n34, &mut chain);
        assert_eq!(chain.len(), 2, "[1,2] then [3,4]");
        for &c in &chain {
            t.backed_up(c, false);
        }
        // Device eviction: [7,8] (unbacked, deleted), [9,9] (deleted), [3,4] (demoted), then
        // [1,2] once no child is on the device (demoted).
        let mut dropped = 0;
        while let Some(n) = t.pop_device_leaf() {
            if t.has_host_copy(n) {
                t.demote(n);
            } else {
                dropped += t.drop_subtree(n).0;
            }
        }
        assert_eq!(dropped, 4);
        assert_eq!((t.size(), t.host_tokens()), (0, 4));
        t.check_invariants();
        assert_eq!(t.evict_host(1), 2, "[3,4] first");
        assert_eq!(t.evict_host(1), 2, "then [1,2], a leaf now");
        assert_eq!(t.host_tokens(), 0);
        t.check_invariants();
    }
}
