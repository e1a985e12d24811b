//! The prompts a router has in flight on one instance, deduplicated as NVIDIA Dynamo's
//! `ActiveSequences` does with `router_assume_kv_reuse` (blocks shared by in-flight requests
//! counted once): a compressed radix tree over token ids with a reference count per node
//! (the in-flight prompts passing through all of it). A node exists while its count is above
//! zero; a child's count never exceeds its parent's. Every prompt ends on a node boundary
//! (inserts split there), so a finished prompt is removed by walking up from its end node,
//! without the token store.

use crate::workload::{SeqId, Token, TokenStore};
use rustc_hash::FxHashMap;

const NONE: u32 = u32::MAX;
const ROOT: u32 = 0;

#[derive(Debug, Clone, Copy, Default)]
struct Node {
    parent: u32,
    seq: SeqId,
    off: u32,
    len: u32,
    first: Token,
    refs: u32,
}

/// The union of the in-flight prompts on one instance.
#[derive(Debug)]
pub struct ActiveTrie {
    nodes: Vec<Node>,
    free: Vec<u32>,
    children: FxHashMap<(u32, Token), u32>,
    tokens: u64,
}

impl Default for ActiveTrie {
    fn default() -> Self {
        ActiveTrie {
            nodes: vec![Node { parent: NONE, ..Node::default() }],
            free: Vec::new(),
            children: FxHashMap::default(),
            tokens: 0,
        }
    }
}

impl ActiveTrie {
    /// Distinct tokens of the in-flight prompts.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// Leading tokens of `seq[..len]` some in-flight prompt shares.
    pub fn shared(&self, store: &TokenStore, seq: SeqId, len: usize) -> usize {
        let (mut node, mut pos) = (ROOT, 0usize);
        while pos < len {
            let Some(&c) = self.children.get(&(node, store.token(seq, pos))) else { break };
            let n = &self.nodes[c as usize];
            let shared = store.lcp((seq, pos), (n.seq, n.off as usize), (n.len as usize).min(len - pos));
            pos += shared;
            if shared < n.len as usize {
                break;
            }
            node = c;
        }
        pos
    }

    fn alloc(&mut self, n: Node) -> u32 {
        super::alloc_node(&mut self.nodes, &mut self.free, n)
    }

    /// Adds `seq[..len]`; returns its end node (the handle for [`remove`](Self::remove)).
    pub fn insert(&mut self, store: &TokenStore, seq: SeqId, len: usize) -> u32 {
        self.nodes[ROOT as usize].refs += 1;
        let (mut node, mut pos) = (ROOT, 0usize);
        while pos < len {
            let first = store.token(seq, pos);
            let Some(&c) = self.children.get(&(node, first)) else {
                let leaf = Node { parent: node, seq, off: pos as u32, len: (len - pos) as u32, first, refs: 1 };
                let id = self.alloc(leaf);
                self.children.insert((node, first), id);
                self.tokens += (len - pos) as u64;
                return id;
            };
            let n = self.nodes[c as usize];
            let shared = store.lcp((seq, pos), (n.seq, n.off as usize), (n.len as usize).min(len - pos));
            if shared < n.len as usize {
                // Split `c` after `shared` tokens: the new upper node takes its place.
                let mid = self.alloc(Node { len: shared as u32, ..n });
                self.children.insert((node, first), mid);
                let rest = store.token(n.seq, n.off as usize + shared);
                self.children.insert((mid, rest), c);
                let lower = &mut self.nodes[c as usize];
                lower.parent = mid;
                lower.off += shared as u32;
                lower.len -= shared as u32;
                lower.first = rest;
                node = mid;
            } else {
                node = c;
            }
            self.nodes[node as usize].refs += 1;
            pos += shared;
        }
        node
    }

    /// Removes the prompt that ended at node `end` (from [`insert`](Self::insert)).
    pub fn remove(&mut self, end: u32) {
        let mut node = end;
        while node != NONE {
            let n = &mut self.nodes[node as usize];
            debug_assert!(n.refs > 0, "removing a prompt that is not in flight");
            n.refs -= 1;
            let (parent, first, len, refs) = (n.parent, n.first, n.len, n.refs);
            if refs == 0 && parent != NONE {
                self.children.remove(&(parent, first));
                self.tokens -= len as u64;
                self.nodes[node as usize] = Node::default();
                self.free.push(node);
            }
            node = parent;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_prefixes_count_once_and_leave_with_their_last_prompt() {
        let a: Vec<Token> = (1..=10).collect();
        let b: Vec<Token> = (1..=6).chain(50..54).collect();
        let store = TokenStore::from_seqs(&[a.clone(), b, a]);
        let mut t = ActiveTrie::default();
        let ea = t.insert(&store, 0, 10);
        assert_eq!((t.tokens(), t.shared(&store, 1, 10)), (10, 6));
        let eb = t.insert(&store, 1, 10); // 6 shared + 4 new
        assert_eq!(t.tokens(), 14);
        let ea2 = t.insert(&store, 2, 7); // a prefix of a: nothing new, a split at 7
        assert_eq!((t.tokens(), t.shared(&store, 0, 10)), (14, 10));
        t.remove(ea);
        assert_eq!((t.tokens(), t.shared(&store, 0, 10)), (11, 7));
        t.remove(eb);
        assert_eq!((t.tokens(), t.shared(&store, 1, 10)), (7, 6));
        t.remove(ea2);
        assert_eq!((t.tokens(), t.shared(&store, 0, 10), t.children.len()), (0, 0, 0));
    }
}
