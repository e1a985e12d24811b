//! The compressed trie of a set of sequences, built from the sequences sorted with the
//! longest-common-prefix (LCP) of neighbours — one node per branching or ending point, never
//! one per character. Each node counts the sequences passing through it. Used by SGLang's
//! scheduler (longest-prefix-match order of its waiting queue) and by `cachesim analyze` (the
//! prefix repetition degree: a *pruned leaf* at count N is a node with count ≥ N whose
//! children all have count < N, the deepest point at which at least N conversations still
//! agree). Sequences are anything implementing [`Items`]: token prefixes in a store
//! ([`Tokens`]), in-memory sequences ([`Seqs`]), or the analysis's texts.

use super::{SeqId, TokenStore};
use rayon::prelude::*;
use std::cmp::Ordering;

/// A set of sequences the trie is built over (strings in characters, or token sequences).
pub trait Items: Sync {
    /// Number of sequences.
    fn count(&self) -> usize;
    /// Length of sequence `i` in units.
    fn len(&self, i: usize) -> usize;
    /// Order of two sequences (lexicographic by unit).
    fn cmp(&self, a: usize, b: usize) -> Ordering;
    /// Longest common prefix of two sequences, in units.
    fn lcp(&self, a: usize, b: usize) -> usize;
}

/// A pruned leaf: `count` sequences share the first `len` units of sequence `rep`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrunedLeaf {
    pub len: usize,
    pub count: usize,
    /// One sequence under the leaf (the first in sorted order).
    pub rep: usize,
}

/// A node of the compressed trie: the end of a shared prefix or of a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrieNode {
    /// Prefix length at this node.
    pub depth: usize,
    /// Parent node (`usize::MAX` for the root, node 0).
    pub parent: usize,
    /// Sequences ending exactly here.
    pub ends: usize,
    /// One sequence through the node.
    pub rep: usize,
}

/// The compressed trie of a set of sequences.
#[derive(Debug, Clone)]
pub struct Trie {
    /// Node 0 is the root; children are deeper than their parents.
    pub nodes: Vec<TrieNode>,
    /// Node at which each sequence ends.
    pub end_node: Vec<usize>,
    /// Sequences passing through each node (its own ends included).
    pub count: Vec<usize>,
}

/// Builds the compressed trie from the sequences sorted with their neighbours' LCPs.
pub fn build_trie<I: Items>(items: &I) -> Trie {
    let n = items.count();
    let mut order: Vec<usize> = (0..n).collect();
    order.par_sort_by(|&a, &b| items.cmp(a, b).then(a.cmp(&b)));
    let lcps: Vec<usize> =
        (0..n).into_par_iter().map(|k| if k == 0 { 0 } else { items.lcp(order[k - 1], order[k]) }).collect();

    // Rightmost-path construction.
    let mut nodes = vec![TrieNode { depth: 0, parent: usize::MAX, ends: 0, rep: order.first().copied().unwrap_or(0) }];
    let mut end_node = vec![0usize; n];
    let mut stack = vec![0usize];
    for (k, &i) in order.iter().enumerate() {
        let l = lcps[k];
        let mut popped = None;
        while nodes[*stack.last().expect("root stays")].depth > l {
            popped = stack.pop();
        }
        let top = *stack.last().expect("root stays");
        if nodes[top].depth < l {
            let child = popped.expect("a deeper node was popped");
            let mid = nodes.len();
            nodes.push(TrieNode { depth: l, parent: top, ends: 0, rep: nodes[child].rep });
            nodes[child].parent = mid;
            stack.push(mid);
        }
        let top = *stack.last().expect("root stays");
        if items.len(i) == l {
            nodes[top].ends += 1;
            end_node[i] = top;
        } else {
            nodes.push(TrieNode { depth: items.len(i), parent: top, ends: 1, rep: i });
            end_node[i] = nodes.len() - 1;
            stack.push(nodes.len() - 1);
        }
    }
    let mut count: Vec<usize> = nodes.iter().map(|v| v.ends).collect();
    for v in deepest_first(&nodes) {
        count[nodes[v].parent] += count[v];
    }
    Trie { nodes, end_node, count }
}

/// Non-root nodes, deepest first (children before parents).
fn deepest_first(nodes: &[TrieNode]) -> Vec<usize> {
    let mut v: Vec<usize> = (1..nodes.len()).collect();
    v.sort_by(|&a, &b| nodes[b].depth.cmp(&nodes[a].depth));
    v
}

/// All pruned leaves at `min_count` (any length), in sorted-sequence order.
pub fn pruned_leaves<I: Items>(items: &I, min_count: usize) -> Vec<PrunedLeaf> {
    let t = build_trie(items);
    let mut max_child = vec![0usize; t.nodes.len()];
    for v in 1..t.nodes.len() {
        let p = t.nodes[v].parent;
        max_child[p] = max_child[p].max(t.count[v]);
    }
    let mut leaves: Vec<(usize, PrunedLeaf)> = (0..t.nodes.len())
        .filter(|&v| t.count[v] >= min_count && max_child[v] < min_count)
        .map(|v| (v, PrunedLeaf { len: t.nodes[v].depth, count: t.count[v], rep: t.nodes[v].rep }))
        .collect();
    leaves.sort_by_key(|&(v, _)| (t.nodes[v].rep, t.nodes[v].depth));
    leaves.into_iter().map(|(_, l)| l).collect()
}

/// Sequences as token prefixes in a store: item `i` is `store` sequence `items[i].0`, tokens
/// `..items[i].1`.
pub struct Tokens<'a> {
    pub store: &'a TokenStore,
    pub items: Vec<(SeqId, usize)>,
}

impl Items for Tokens<'_> {
    fn count(&self) -> usize {
        self.items.len()
    }
    fn len(&self, i: usize) -> usize {
        self.items[i].1
    }
    fn cmp(&self, a: usize, b: usize) -> Ordering {
        self.store.cmp_prefixes(self.items[a], self.items[b])
    }
    fn lcp(&self, a: usize, b: usize) -> usize {
        let (sa, la) = self.items[a];
        let (sb, lb) = self.items[b];
        self.store.lcp((sa, 0), (sb, 0), la.min(lb))
    }
}

/// Items made of token (or code point) sequences held in memory.
pub struct Seqs<'a>(pub &'a [Vec<u32>]);

impl Items for Seqs<'_> {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn len(&self, i: usize) -> usize {
        self.0[i].len()
    }
    fn cmp(&self, a: usize, b: usize) -> Ordering {
        self.0[a].cmp(&self.0[b])
    }
    fn lcp(&self, a: usize, b: usize) -> usize {
        self.0[a].iter().zip(&self.0[b]).take_while(|(x, y)| x == y).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn seqs(words: &[&str]) -> Vec<Vec<u32>> {
        words.iter().map(|w| w.chars().map(|c| c as u32).collect()).collect()
    }

    fn leaves(words: &[&str], n: usize) -> Vec<(usize, usize)> {
        let s = seqs(words);
        let mut v: Vec<(usize, usize)> = pruned_leaves(&Seqs(&s), n).iter().map(|l| (l.len, l.count)).collect();
        v.sort();
        v
    }

    #[test]
    fn nested_common_prefixes_count_once() {
        // "abc" is shared by 4; "abcdx" by 2 and "abcey" by 2: the pruned leaves at N=2 are the
        // two longer prefixes, not their common "abc".
        let w = ["abcdx1", "abcdx2", "abcey1", "abcey2", "zzz"];
        assert_eq!(leaves(&w, 2), vec![(5, 2), (5, 2)]);
        // At N=3 only "abc" (count 4) qualifies.
        assert_eq!(leaves(&w, 3), vec![(3, 4)]);
        // At N=5 only the root (count 5, depth 0).
        assert_eq!(leaves(&w, 5), vec![(0, 5)]);
    }

    #[test]
    fn identical_strings_prefixes_and_empties() {
        assert_eq!(leaves(&["same", "same", "same"], 2), vec![(4, 3)]);
        // "ab" is a prefix of "abc": both pass through "ab"; the end of "abc" has count 1.
        assert_eq!(leaves(&["ab", "abc"], 2), vec![(2, 2)]);
        assert_eq!(leaves(&["", "", "x"], 2), vec![(0, 3)]);
        assert_eq!(leaves(&[], 2), vec![]);
    }

    #[test]
    fn min_count_one_gives_every_maximal_string() {
        assert_eq!(leaves(&["ab", "abc", "abd", "abd", "x"], 1), vec![(1, 1), (3, 1), (3, 2)]);
    }

    #[test]
    fn non_ascii_is_counted_in_scalar_values() {
        assert_eq!(leaves(&["日本語のテキストA", "日本語のテキストB", "über"], 2), vec![(8, 2)]);
    }

    /// The definition, literally: every distinct prefix with its count.
    fn brute(s: &[Vec<u32>], n: usize) -> Vec<(usize, usize)> {
        let mut counts: HashMap<&[u32], usize> = HashMap::new();
        for x in s {
            for l in 0..=x.len() {
                *counts.entry(&x[..l]).or_insert(0) += 1;
            }
        }
        let mut out: Vec<(usize, usize)> = counts
            .iter()
            .filter(|(p, &c)| {
                c >= n && !counts.iter().any(|(q, &d)| q.len() == p.len() + 1 && q.starts_with(p) && d >= n)
            })
            .map(|(p, &c)| (p.len(), c))
            .collect();
        out.sort();
        out
    }

    proptest! {
        #[test]
        fn matches_brute_force(s in prop::collection::vec(prop::collection::vec(0u32..3, 0..8), 0..14), n in 1usize..5) {
            let mut fast: Vec<(usize, usize)> = pruned_leaves(&Seqs(&s), n).iter().map(|l| (l.len, l.count)).collect();
            fast.sort();
            prop_assert_eq!(fast, brute(&s, n));
        }
    }
}
