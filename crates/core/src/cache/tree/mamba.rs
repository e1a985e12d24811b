//! The radix tree's recurrent-state component, as SGLang 0.5.23 keeps it for a model whose
//! layers mix full attention with linear-attention or Mamba layers (Qwen3-Next: a
//! `UnifiedRadixCache` of FULL and MAMBA components, `mem_cache/unified_cache/components/
//! mamba.py` `MambaComponent`, both tree cores).
//!
//! Every node holds its full-attention KV; it may also hold one slot of the state pool: the
//! linear layers' state after the whole path from the root to its end. A node without one is a
//! *tombstone* of this component. A match ends at the deepest matched node that ends exactly
//! there and holds a state (`create_match_validator`); a split's upper part holds none
//! (`redistribute_on_node_split`); a lock pins the one node's state (`acquire_component_lock`),
//! beside the full path lock. The states keep an LRU list of their own (`lru_lists[MAMBA]`): a
//! state set on a node goes to the most recent end, and so does a match's end node or an insert
//! ending on a node that already holds one (`refresh_lru`, `commit_insert_component_data`).
//! Eviction of states walks that list from the least recent unlocked end: an unlocked full leaf
//! goes whole, its KV with it; any other node loses its state alone and stays a tombstone
//! (`_evict_device_next_node`). A full leaf evicted for KV takes its state with it. The caller
//! ([`crate::cache::mamba`]) keeps the pools.

use super::{NodeId, RadixTree, ROOT};
use crate::workload::{SeqId, TokenStore};

use crate::cache::lru::{LruList, NIL};

#[derive(Debug, Clone, Copy)]
struct StateNode {
    /// Holds a state slot (not a tombstone).
    state: bool,
    /// State locks on this node alone (SGLang's MAMBA `lock_ref`, tombstones counted too).
    lock: u32,
}

const FRESH: StateNode = StateNode { state: false, lock: 0 };

/// The tree's state component.
#[derive(Debug, Clone)]
pub struct Mamba {
    nodes: Vec<StateNode>,
    /// The list of the nodes holding their component's KV or state, most recent first.
    list: LruList,
    /// States in unlocked and in locked nodes.
    evictable: u64,
    protected: u64,
}

/// What a match found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateFound {
    /// Tokens a request may reuse: the end of the deepest matched node holding a state
    /// (`device_prefix_len`).
    pub hit: usize,
    /// That node (`ROOT`: none).
    pub node: NodeId,
    /// Every token matched along the path, states or not (`full_kv_hit_length`).
    pub full: usize,
}

impl Mamba {
    fn new(nodes: usize) -> Self {
        Self { nodes: vec![FRESH; nodes], list: LruList::new(nodes), evictable: 0, protected: 0 }
    }

    /// A node was made (or an id reused).
    pub(super) fn made(&mut self, n: NodeId) {
        let i = n as usize;
        if self.nodes.len() <= i {
            self.nodes.resize(i + 1, FRESH);
        }
        self.nodes[i] = FRESH;
        self.list.forget(n);
    }

    /// `upper` was split off above a node, which keeps its state, lock and place in the list:
    /// the upper part has neither (`redistribute_on_node_split`).
    pub(super) fn split(&mut self, upper: NodeId) {
        self.nodes[upper as usize] = FRESH;
        self.list.forget(upper);
    }

    /// Unlocked node `n` was deleted with its KV, its state (if any) with it.
    pub(super) fn deleted(&mut self, n: NodeId) {
        debug_assert_eq!(self.nodes[n as usize].lock, 0, "delete of a state-locked node");
        if self.nodes[n as usize].state {
            self.list.unlink(n);
            self.evictable -= 1;
        }
        self.nodes[n as usize] = FRESH;
        self.list.forget(n);
    }

    /// Moves listed node `n` to the most recent end (`reset_node_mru`).
    fn touch(&mut self, n: NodeId) {
        self.list.unlink(n);
        self.list.link_mru(n);
    }

    /// The first unlocked node from `x` toward the most recent end (`get_prev_no_lock`).
    fn unlocked_from(&self, mut x: NodeId) -> NodeId {
        while x != NIL && self.nodes[x as usize].lock > 0 {
            x = self.list.newer(x);
        }
        x
    }
}

impl RadixTree {
    /// Gives the tree SGLang's recurrent-state component.
    pub fn enable_mamba(&mut self) {
        self.mamba = Some(Box::new(Mamba::new(self.nodes.len())));
    }

    fn m(&self) -> &Mamba {
        self.mamba.as_ref().expect("the state component is on")
    }

    fn mm(&mut self) -> &mut Mamba {
        self.mamba.as_mut().expect("the state component is on")
    }

    /// States the tree holds (each one slot of the pool).
    pub fn states(&self) -> u64 {
        let m = self.m();
        m.evictable + m.protected
    }

    /// States in nodes no request locks (`mamba_evictable_size`).
    pub fn states_evictable(&self) -> u64 {
        self.m().evictable
    }

    /// States in locked nodes (`mamba_protected_size`).
    pub fn states_protected(&self) -> u64 {
        self.m().protected
    }

    /// Whether node `n` holds a state.
    pub fn has_state(&self, n: NodeId) -> bool {
        n != ROOT && self.m().nodes[n as usize].state
    }

    /// Gives node `n` a state, the most recent (`set_component_device_value`, or a new leaf's
    /// `insert_mru`).
    fn set_state(&mut self, n: NodeId) {
        let m = self.mm();
        debug_assert!(!m.nodes[n as usize].state);
        m.nodes[n as usize].state = true;
        if m.nodes[n as usize].lock > 0 {
            m.protected += 1;
        } else {
            m.evictable += 1;
        }
        m.list.link_mru(n);
    }

    /// SGLang's `match_prefix` with the state component: walks `seq[..len]` (page-aligned),
    /// splitting a partly matched node (whose upper part holds no state), and ends at the
    /// deepest node holding a state; that node's state becomes the most recent and its path is
    /// stamped as used (`_match_prefix_helper`, `_match_post_processor`). Does not lock.
    pub fn match_mamba(&mut self, store: &TokenStore, seq: SeqId, len: usize) -> StateFound {
        let len = self.align(len);
        let (mut node, mut pos) = (ROOT, 0);
        let (mut best, mut hit) = (ROOT, 0);
        while pos < len {
            let Some((child, same)) = self.step(store, seq, pos, len, node) else { break };
            pos += same;
            if same < self.len_of(child) {
                // `_split_node` stamps the lower part anew; the upper part holds no state.
                self.split(store, child, same);
                let t = self.tick();
                self.set_access(child, t);
                break;
            }
            if self.has_state(child) {
                (best, hit) = (child, pos);
            }
            node = child;
        }
        if best != ROOT {
            self.mm().touch(best);
        }
        self.stamp_path(best);
        StateFound { hit, node: best, full: pos }
    }

    /// [`match_mamba`](Self::match_mamba)'s hit, read-only.
    pub fn peek_mamba(&self, store: &TokenStore, seq: SeqId, len: usize) -> usize {
        let len = self.align(len);
        let (mut node, mut pos, mut hit) = (ROOT, 0, 0);
        while pos < len {
            let Some((child, same)) = self.step(store, seq, pos, len, node) else { break };
            if same < self.len_of(child) {
                break;
            }
            pos += same;
            if self.has_state(child) {
                hit = pos;
            }
            node = child;
        }
        hit
    }

    /// Locks node `n`'s state alone (a tombstone's lock counts too; the root takes none).
    pub fn state_lock(&mut self, n: NodeId) {
        if n == ROOT {
            return;
        }
        let m = self.mm();
        let x = &mut m.nodes[n as usize];
        if x.lock == 0 && x.state {
            m.evictable -= 1;
            m.protected += 1;
        }
        m.nodes[n as usize].lock += 1;
    }

    /// Releases a lock [`state_lock`](Self::state_lock) took.
    pub fn state_unlock(&mut self, n: NodeId) {
        if n == ROOT {
            return;
        }
        let m = self.mm();
        let x = &mut m.nodes[n as usize];
        debug_assert!(x.lock > 0, "state unlock of an unlocked node");
        x.lock -= 1;
        if x.lock == 0 && x.state {
            m.evictable += 1;
            m.protected -= 1;
        }
    }

    /// SGLang's insert of `seq[..len]` (page-aligned) carrying a state for its end
    /// (`commit_insert_component_data`): a new leaf takes it; an existing node without one
    /// takes it too and is stamped anew; an existing node holding one keeps its own, becomes
    /// the most recent and is stamped anew, and the caller frees the state it brought
    /// (`mamba_exist`). Returns the tokens of the key already in the tree (the inserting
    /// request's duplicates, as [`RadixTree::insert`]), the node ending the key, and whether
    /// that node already held a state. An empty key ends at the root, which holds none.
    pub fn insert_mamba(&mut self, store: &TokenStore, seq: SeqId, len: usize) -> (usize, NodeId, bool) {
        let len = self.align(len);
        let (present, node) = self.insert(store, seq, len);
        if node == ROOT {
            return (present, ROOT, true);
        }
        if present < len {
            self.set_state(node);
            return (present, node, false);
        }
        let t = self.tick();
        self.set_access(node, t);
        if self.has_state(node) {
            self.mm().touch(node);
            return (present, node, true);
        }
        self.set_state(node);
        (present, node, false)
    }

    /// Frees up to `k` states, SGLang's state walk: from the least recent node no request
    /// locks, an unlocked full leaf is deleted whole (its KV too), any other node becomes a
    /// tombstone. Returns (full tokens freed, states freed).
    pub fn evict_states(&mut self, k: u64) -> (u64, u64) {
        let (mut full, mut freed) = (0, 0);
        let mut cursor = self.m().unlocked_from(self.m().list.lru());
        while freed < k && cursor != NIL {
            let x = cursor;
            cursor = self.m().unlocked_from(self.m().list.newer(x));
            if self.is_evictable_leaf(x) {
                full += self.len_of(x) as u64;
                self.leaves.remove(&self.leaf_key(x));
                self.delete(x);
            } else {
                let m = self.mm();
                m.list.unlink(x);
                m.nodes[x as usize].state = false;
                m.evictable -= 1;
            }
            freed += 1;
        }
        (full, freed)
    }

    /// Debug check of the state counters and list.
    pub(super) fn check_mamba(&self) {
        let Some(m) = self.mamba.as_ref() else { return };
        let (mut ev, mut pr, mut listed) = (0, 0, 0);
        for (i, n) in self.nodes.iter().enumerate() {
            if i == ROOT as usize || !n.alive {
                continue;
            }
            let x = m.nodes[i];
            if x.state {
                listed += 1;
                if x.lock == 0 {
                    ev += 1;
                } else {
                    pr += 1;
                }
            }
            assert!(x.lock <= n.lock_ref, "state lock above the full lock on node {i}");
        }
        assert_eq!((ev, pr), (m.evictable, m.protected), "state counters");
        let (mut k, mut x) = (0, m.list.mru());
        while x != NIL {
            assert!(m.nodes[x as usize].state, "tombstone {x} in the state list");
            k += 1;
            x = m.list.older(x);
        }
        assert_eq!(k, listed, "state list length");
        assert!(m.nodes[ROOT as usize].lock == 0 && !m.nodes[ROOT as usize].state, "the root holds no state");
    }
}
