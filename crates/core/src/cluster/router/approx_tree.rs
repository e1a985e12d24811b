//! The approximate radix tree of sglang's model gateway (`sgl-model-gateway/src/policies/tree.rs`,
//! `Tree`): one tree over request text shared by all workers ("tenants"), each node recording
//! which tenants passed through it with a last-access epoch, and each tenant's character
//! count. Text is token ids rendered at `chars_per_token` characters ([`super::text`]), so
//! splits fall on token boundaries and the tree is a compressed radix tree over token ids:
//! an edge label is a range `(sequence, offset, length)` of the workload's [`TokenStore`],
//! never a copy, and children are found by `(node, first token)` in one hash map. The store
//! passed to every call must be the one the tree was built from.
//!
//! Rules kept from upstream (`Tree::insert`, `prefix_match_with_counts`,
//! `evict_tenant_by_size`, `leaf_of`):
//! * one global epoch counter, taken once per insert (by the new leaf, or by the node where
//!   the text ends) and once per match;
//! * insert: a node passed through or created by a split gets the tenant at epoch 0 when it
//!   lacks it (and its characters count for the tenant); a split copies the node's tenants and
//!   its cached "last tenant";
//! * match: walk while labels match; the tenant is the deepest reached node's cached last
//!   tenant if it still holds the node, else its first tenant (upstream: the first in its map);
//!   the node's timestamp for that tenant is refreshed only when the match's epoch is a
//!   multiple of 8;
//! * eviction: every (node, tenant) where no child holds the tenant is a leaf; leaves leave in
//!   ascending epoch (ties: tenant, then node) while the tenant holds more than the limit;
//!   a node with neither tenants nor children is deleted, and a parent left with the tenant in
//!   no child becomes a leaf candidate.

use crate::workload::{SeqId, Token, TokenStore};
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const NONE: u32 = u32::MAX;
const ROOT: u32 = 0;

#[derive(Debug, Clone, Default)]
struct Node {
    parent: u32,
    seq: SeqId,
    off: u32,
    len: u32,
    first: Token,
    kids: Vec<u32>,
    /// (tenant, last-access epoch).
    tenants: Vec<(u32, u64)>,
    last_tenant: u32,
}

impl Node {
    fn epoch_of(&self, t: u32) -> Option<u64> {
        self.tenants.iter().find(|e| e.0 == t).map(|e| e.1)
    }
    fn has(&self, t: u32) -> bool {
        self.tenants.iter().any(|e| e.0 == t)
    }
    fn set(&mut self, t: u32, epoch: u64) {
        match self.tenants.iter_mut().find(|e| e.0 == t) {
            Some(e) => e.1 = epoch,
            None => self.tenants.push((t, epoch)),
        }
    }
}

/// What a prefix match found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Match {
    /// Matched tokens (characters = tokens × chars per token).
    pub tokens: usize,
    /// A tenant of the deepest reached node (`None`: the node has no tenant).
    pub tenant: Option<usize>,
}

/// sglang's approximate tree over token ids rendered as text.
#[derive(Debug)]
pub struct ApproxTree {
    chars_per_token: u64,
    nodes: Vec<Node>,
    free: Vec<u32>,
    children: FxHashMap<(u32, Token), u32>,
    chars: Vec<u64>,
    epoch: u64,
}

impl ApproxTree {
    /// A tree for `n` tenants, each registered as upstream's `init_workers` does (an empty
    /// insert: the root holds every tenant, one epoch each).
    pub fn new(n: usize, chars_per_token: u32) -> Self {
        let root = Node { parent: NONE, last_tenant: NONE, ..Node::default() };
        let mut t = ApproxTree {
            chars_per_token: chars_per_token.max(1) as u64,
            nodes: vec![root],
            free: Vec::new(),
            children: FxHashMap::default(),
            chars: vec![0; n],
            epoch: 0,
        };
        for i in 0..n {
            let e = t.next_epoch();
            t.nodes[ROOT as usize].set(i as u32, e);
        }
        t
    }

    fn next_epoch(&mut self) -> u64 {
        self.epoch += 1;
        self.epoch - 1
    }

    /// Characters the tree holds for `tenant`.
    pub fn tenant_chars(&self, tenant: usize) -> u64 {
        self.chars[tenant]
    }

    /// Live nodes, the root included.
    pub fn num_nodes(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// The tenant with the fewest characters among those `live` keeps (ties: lowest index): the
    /// older router's `get_smallest_tenant`.
    pub fn smallest_tenant(&self, live: impl Fn(usize) -> bool) -> usize {
        (0..self.chars.len()).filter(|&i| live(i)).min_by_key(|&i| self.chars[i]).unwrap_or(0)
    }

    /// Registers `tenant` as [`new`](Self::new) does (an empty insert at the root).
    pub fn add_tenant(&mut self, tenant: usize) {
        let e = self.next_epoch();
        self.nodes[ROOT as usize].set(tenant as u32, e);
    }

    /// Takes `tenant` out of every node (`Tree::remove_tenant`): nodes left with neither
    /// tenants nor children are deleted, deepest first; its character count is zero after.
    pub fn remove_tenant(&mut self, tenant: usize) {
        let t = tenant as u32;
        // Nodes parents first; deleting them in reverse visits children before parents.
        let mut order = vec![ROOT];
        let mut i = 0;
        while i < order.len() {
            order.extend_from_slice(&self.nodes[order[i] as usize].kids);
            i += 1;
        }
        for &node in order.iter().rev() {
            let n = &mut self.nodes[node as usize];
            n.tenants.retain(|e| e.0 != t);
            if n.last_tenant == t {
                n.last_tenant = NONE;
            }
            let parent = n.parent;
            if parent != NONE && n.kids.is_empty() && n.tenants.is_empty() {
                let first = n.first;
                self.children.remove(&(parent, first));
                self.nodes[parent as usize].kids.retain(|&k| k != node);
                self.nodes[node as usize] = Node::default();
                self.free.push(node);
            }
        }
        self.chars[tenant] = 0;
    }

    /// Matches `seq[..len]` (`prefix_match_with_counts`).
    pub fn prefix_match(&mut self, store: &TokenStore, seq: SeqId, len: usize) -> Match {
        let (mut node, mut pos) = (ROOT, 0usize);
        while pos < len {
            let Some(&child) = self.children.get(&(node, store.token(seq, pos))) else { break };
            let c = &self.nodes[child as usize];
            let shared = store.lcp((seq, pos), (c.seq, c.off as usize), (c.len as usize).min(len - pos));
            pos += shared;
            node = child;
            if shared < c.len as usize {
                break;
            }
        }
        let n = &mut self.nodes[node as usize];
        let tenant = if n.last_tenant != NONE && n.has(n.last_tenant) {
            Some(n.last_tenant)
        } else {
            let t = n.tenants.first().map(|e| e.0);
            n.last_tenant = t.unwrap_or(NONE);
            t
        };
        let epoch = self.next_epoch();
        if let Some(t) = tenant {
            let n = &mut self.nodes[node as usize];
            if epoch & 7 == 0 && n.has(t) {
                n.set(t, epoch);
            }
        }
        Match { tokens: pos, tenant: tenant.map(|t| t as usize) }
    }

    fn alloc(&mut self, node: Node) -> u32 {
        super::alloc_node(&mut self.nodes, &mut self.free, node)
    }

    /// Adds `tenant` to `node` at epoch 0 if it lacks it (a node passed through).
    fn pass(&mut self, node: u32, tenant: u32) {
        let n = &mut self.nodes[node as usize];
        if !n.has(tenant) {
            n.tenants.push((tenant, 0));
            self.chars[tenant as usize] += n.len as u64 * self.chars_per_token;
        }
    }

    /// Inserts `seq[..len]` for `tenant` (`Tree::insert`).
    pub fn insert(&mut self, store: &TokenStore, seq: SeqId, len: usize, tenant: usize) {
        let t = tenant as u32;
        if !self.nodes[ROOT as usize].has(t) {
            self.nodes[ROOT as usize].tenants.push((t, 0));
        }
        let (mut node, mut pos) = (ROOT, 0usize);
        while pos < len {
            let first = store.token(seq, pos);
            let Some(&child) = self.children.get(&(node, first)) else {
                let epoch = self.next_epoch();
                let rest = (len - pos) as u32;
                let leaf = Node {
                    parent: node,
                    seq,
                    off: pos as u32,
                    len: rest,
                    first,
                    kids: Vec::new(),
                    tenants: vec![(t, epoch)],
                    last_tenant: t,
                };
                let id = self.alloc(leaf);
                self.children.insert((node, first), id);
                self.nodes[node as usize].kids.push(id);
                self.chars[tenant] += rest as u64 * self.chars_per_token;
                return;
            };
            let c = &self.nodes[child as usize];
            let (cseq, coff, clen) = (c.seq, c.off as usize, c.len as usize);
            let shared = store.lcp((seq, pos), (cseq, coff), clen.min(len - pos));
            if shared < clen {
                // Split `child` after `shared` tokens: the new node takes its place.
                let mid = Node {
                    parent: node,
                    seq: cseq,
                    off: coff as u32,
                    len: shared as u32,
                    first,
                    kids: vec![child],
                    tenants: c.tenants.clone(),
                    last_tenant: c.last_tenant,
                };
                let m = self.alloc(mid);
                self.children.insert((node, first), m);
                let kids = &mut self.nodes[node as usize].kids;
                if let Some(k) = kids.iter_mut().find(|k| **k == child) {
                    *k = m;
                }
                let rest_first = store.token(cseq, coff + shared);
                let c = &mut self.nodes[child as usize];
                c.parent = m;
                c.off += shared as u32;
                c.len -= shared as u32;
                c.first = rest_first;
                self.children.insert((m, rest_first), child);
                self.pass(m, t);
                node = m;
            } else {
                self.pass(child, t);
                node = child;
            }
            pos += shared;
        }
        let epoch = self.next_epoch();
        self.nodes[node as usize].set(t, epoch);
    }

    fn is_leaf_for(&self, node: u32, t: u32) -> bool {
        let n = &self.nodes[node as usize];
        n.has(t) && !n.kids.iter().any(|&k| self.nodes[k as usize].has(t))
    }

    /// Evicts, for every tenant holding more than `max_chars` characters, its leaves in
    /// ascending last access until it holds at most `max_chars` (`evict_tenant_by_size`).
    pub fn evict(&mut self, max_chars: u64) {
        if self.chars.iter().all(|&c| c <= max_chars) {
            return; // nothing would leave: skip the walk
        }
        let mut heap = BinaryHeap::new();
        let mut stack = vec![ROOT];
        while let Some(node) = stack.pop() {
            let n = &self.nodes[node as usize];
            stack.extend_from_slice(&n.kids);
            for &(t, ts) in &n.tenants {
                if self.is_leaf_for(node, t) {
                    heap.push(Reverse((ts, t, node)));
                }
            }
        }
        while let Some(Reverse((_, t, node))) = heap.pop() {
            if self.chars[t as usize] <= max_chars || !self.is_leaf_for(node, t) {
                continue;
            }
            let n = &mut self.nodes[node as usize];
            let len = n.len as u64 * self.chars_per_token;
            n.tenants.retain(|e| e.0 != t);
            self.chars[t as usize] = self.chars[t as usize].saturating_sub(len);
            let parent = n.parent;
            if parent == NONE {
                continue;
            }
            if n.kids.is_empty() && n.tenants.is_empty() {
                let first = n.first;
                self.children.remove(&(parent, first));
                self.nodes[parent as usize].kids.retain(|&k| k != node);
                self.nodes[node as usize] = Node::default();
                self.free.push(node);
            }
            if self.is_leaf_for(parent, t) {
                let ts = self.nodes[parent as usize].epoch_of(t).unwrap_or(0);
                heap.push(Reverse((ts, t, parent)));
            }
        }
    }
}
