//! Dense content ids for the full blocks of a store's sequences, for one block size: two full
//! blocks get the same id exactly when their sequences agree on every token up to the block's
//! end — the identity vLLM's chained block hashes stand for, without hashing and without
//! collisions. Ids run `0..len()`, so a cache indexes them with a plain vector.
//!
//! Built once from the store's sorted order ([`TokenStore::prefix_order`]): a sequence takes
//! its predecessor's ids for the blocks they share and fresh consecutive ids for the rest. Ids
//! are kept as segments (`id = base + block index` up to a segment end), so a sequence costs a
//! few words however long it is, and extending a predecessor (the next turn of a conversation)
//! continues its last segment.

use super::{PrefixOrder, SeqId, TokenStore};

/// Blocks `..end` (from the previous segment's end) have id `base + block index` (wrapping).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    end: u32,
    base: u32,
}

/// Content ids of every full block of every sequence of a store.
#[derive(Debug, Clone, Default)]
pub struct BlockIds {
    segments: Vec<Segment>,
    /// Per sequence: its first segment; its segments end at the next sequence's first.
    first: Vec<u32>,
    len: u32,
}

impl BlockIds {
    /// Ids of the `block`-token blocks of `store`.
    ///
    /// # Panics
    /// When the store holds 2^32 or more full blocks (ids are 32-bit).
    pub fn new(store: &TokenStore, block: usize) -> Self {
        Self::of(store, block, store.prefix_order())
    }

    /// Ids of the blocks of the sequences in `prefixes` (some or all of the store's, as
    /// [`TokenStore::prefix_order_of`] gives them); other sequences have none.
    ///
    /// # Panics
    /// As [`new`](Self::new).
    pub fn of(store: &TokenStore, block: usize, prefixes: &PrefixOrder) -> Self {
        assert!(block > 0, "block size 0");
        let n = store.num_seqs();
        let mut segments: Vec<Segment> = Vec::with_capacity(n);
        let mut range = vec![(0u32, 0u32); n];
        let mut next_id: u64 = 0;
        let mut prev: Option<SeqId> = None;
        for (&seq, &lcp) in prefixes.order.iter().zip(&prefixes.lcp_prev) {
            let full = (store.seq_len(seq) / block) as u32;
            let shared = lcp / block as u32;
            let start = segments.len() as u32;
            if let (Some(p), true) = (prev, shared > 0) {
                let (from, to) = range[p as usize];
                for k in from..to {
                    let s = segments[k as usize];
                    segments.push(Segment { end: s.end.min(shared), ..s });
                    if s.end >= shared {
                        break;
                    }
                }
            }
            if full > shared {
                let base = (next_id as u32).wrapping_sub(shared);
                let own = segments.len() as u32 > start;
                match segments.last_mut() {
                    Some(last) if own && last.base == base => last.end = full,
                    _ => segments.push(Segment { end: full, base }),
                }
                next_id += (full - shared) as u64;
                assert!(next_id <= u32::MAX as u64, "more than 2^32 distinct blocks");
            }
            range[seq as usize] = (start, segments.len() as u32);
            prev = Some(seq);
        }
        // Sequences own contiguous segment ranges in sorted order, not id order: re-lay them.
        let mut first = Vec::with_capacity(n + 1);
        let mut laid = Vec::with_capacity(segments.len());
        for &(from, to) in &range {
            first.push(laid.len() as u32);
            laid.extend_from_slice(&segments[from as usize..to as usize]);
        }
        first.push(laid.len() as u32);
        Self { segments: laid, first, len: next_id as u32 }
    }

    /// Number of distinct ids.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether there are no full blocks at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn segments(&self, seq: SeqId) -> &[Segment] {
        &self.segments[self.first[seq as usize] as usize..self.first[seq as usize + 1] as usize]
    }

    /// Id of full block `i` of `seq`.
    pub fn id(&self, seq: SeqId, i: usize) -> u32 {
        self.ids(seq, i, i + 1).next().expect("a full block")
    }

    /// Ids of full blocks `from..to` of `seq`, in order.
    pub fn ids(&self, seq: SeqId, from: usize, to: usize) -> Ids<'_> {
        let segs = self.segments(seq);
        let k = segs.partition_point(|s| s.end as usize <= from);
        debug_assert!(to <= segs.last().map_or(0, |s| s.end as usize) || from >= to, "not a full block");
        let (end, base) = segs.get(k).map_or((u32::MAX, 0), |s| (s.end, s.base));
        Ids { segs: &segs[(k + 1).min(segs.len())..], end, base, i: from as u32, to: to as u32 }
    }
}

/// Iterator over a range of a sequence's block ids.
pub struct Ids<'a> {
    /// Segments after the current one.
    segs: &'a [Segment],
    /// The current segment.
    end: u32,
    base: u32,
    i: u32,
    to: u32,
}

impl Iterator for Ids<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        if self.i >= self.to {
            return None;
        }
        if self.i == self.end {
            let (s, rest) = self.segs.split_first().expect("a full block");
            (self.end, self.base, self.segs) = (s.end, s.base, rest);
        }
        let id = self.base.wrapping_add(self.i);
        self.i += 1;
        Some(id)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.to.saturating_sub(self.i) as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Ids<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Token;
    use proptest::prelude::*;

    /// Ids agree exactly when the prefixes through the block agree, and are dense.
    fn check(store: &TokenStore, block: usize) {
        let all: Vec<SeqId> = (0..store.num_seqs() as SeqId).collect();
        check_of(store, block, &BlockIds::new(store, block), &all);
    }

    /// [`check`] for the ids of some sequences.
    fn check_of(store: &TokenStore, block: usize, ids: &BlockIds, seqs: &[SeqId]) {
        let full = |s: SeqId| store.seq_len(s) / block;
        let mut seen = vec![false; ids.len() as usize];
        for &a in seqs {
            let all: Vec<u32> = ids.ids(a, 0, full(a)).collect();
            assert_eq!(all.len(), full(a));
            for (i, &id) in all.iter().enumerate() {
                assert_eq!(ids.id(a, i), id);
                assert_eq!(ids.ids(a, i, full(a)).next(), Some(id), "iteration from the middle");
                seen[id as usize] = true;
                for &b in seqs {
                    for j in 0..full(b) {
                        let same = i == j && store.lcp((a, 0), (b, 0), usize::MAX) >= (i + 1) * block;
                        assert_eq!(ids.id(b, j) == id, same, "seq {a} block {i} vs seq {b} block {j}");
                    }
                }
            }
        }
        assert!(seen.iter().all(|&s| s), "ids are dense");
    }

    #[test]
    fn a_conversation_is_one_segment_and_branches_split() {
        let base: Vec<Token> = (0..12).collect();
        let mut branch = base[..6].to_vec();
        branch.extend([99, 98, 97, 96]);
        let seqs = [base[..4].to_vec(), base[..8].to_vec(), base.clone(), branch, vec![7; 3]];
        let store = TokenStore::from_seqs(&seqs);
        check(&store, 2);
        let ids = BlockIds::new(&store, 2);
        assert_eq!(ids.len(), 6 + 2 + 1);
        for s in 0..3 {
            assert_eq!(ids.segments(s).len(), 1, "turn {s} continues the one before");
        }
        assert_eq!(ids.segments(3).len(), 2, "the branch keeps 3 blocks, then its own 2");
        assert_eq!(ids.segments(4).len(), 1);
        let short = TokenStore::from_seqs(&[vec![1u32]]);
        assert!(BlockIds::new(&short, 2).is_empty() && BlockIds::new(&short, 2).segments(0).is_empty());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn ids_match_prefix_identity(
            seqs in prop::collection::vec(prop::collection::vec(0u32..3, 0..14), 0..9),
            block in 1usize..5,
        ) {
            check(&TokenStore::from_seqs(&seqs), block);
        }

        #[test]
        fn ids_of_some_sequences_match_prefix_identity(
            seqs in prop::collection::vec(prop::collection::vec(0u32..3, 0..14), 1..9),
            pick in prop::collection::vec(any::<bool>(), 9),
            block in 1usize..5,
        ) {
            let store = TokenStore::from_seqs(&seqs);
            let some: Vec<SeqId> = (0..seqs.len() as SeqId).filter(|&s| pick[s as usize]).collect();
            let ids = BlockIds::of(&store, block, &store.prefix_order_of(some.clone()));
            check_of(&store, block, &ids, &some);
        }
    }
}
