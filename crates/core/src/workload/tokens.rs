//! Token storage shared by every request of a workload. A *sequence* is a list of segments:
//! slices of one flat token arena (tokenized text) or *runs* `base, base+1, …` that stand for
//! tokens never materialised (Mooncake hash blocks, length-only traces, synthetic outputs).
//! Requests are prefixes of sequences, so the turns of a conversation share one sequence.
//! This module also owns the content fingerprint of a token range (radix child keys), computed
//! run-wise in O(1) per run, and the sequences in sorted order with the prefix each shares with
//! its predecessor (from which block content ids are built).

use rayon::prelude::*;
use std::cmp::Ordering;
use std::sync::OnceLock;

/// A token id.
pub type Token = u32;
/// Index of a sequence in a [`TokenStore`].
pub type SeqId = u32;

/// Longest block or page, in tokens, the fingerprint tables cover.
pub const MAX_BLOCK_TOKENS: usize = 512;

/// The sequences of a store sorted by content: see [`TokenStore::prefix_order`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixOrder {
    /// Sequence ids in sorted order.
    pub order: Vec<SeqId>,
    /// `lcp_prev[k]`: common prefix length of `order[k − 1]` and `order[k]` (0 for `k = 0`).
    pub lcp_prev: Vec<u32>,
}

/// A contiguous piece of a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunk<'a> {
    /// Tokens stored in the arena.
    Slice(&'a [Token]),
    /// Tokens `base, base+1, …, base+len-1`.
    Run { base: Token, len: u32 },
}

impl Chunk<'_> {
    /// Number of tokens in the chunk.
    pub fn len(&self) -> usize {
        match self {
            Chunk::Slice(s) => s.len(),
            Chunk::Run { len, .. } => *len as usize,
        }
    }
    /// True when the chunk holds no token.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Token at index `i` of the chunk.
    pub fn get(&self, i: usize) -> Token {
        match self {
            Chunk::Slice(s) => s[i],
            Chunk::Run { base, .. } => base.wrapping_add(i as u32),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Segment {
    /// Arena offset (slice) or first token (run).
    start: usize,
    len: u32,
    /// Offset of the segment's first token inside its sequence.
    pos: u32,
    run: bool,
}

#[derive(Debug, Clone, Copy)]
struct SeqMeta {
    first_seg: u32,
    num_segs: u32,
    len: u32,
}

/// Arena of token sequences; read-only once built, shared (`Arc`) by caches and runs.
#[derive(Debug, Default)]
pub struct TokenStore {
    arena: Vec<Token>,
    segments: Vec<Segment>,
    seqs: Vec<SeqMeta>,
    open: Option<SeqMeta>,
    /// The sequences in sorted order (computed once).
    sorted: OnceLock<PrefixOrder>,
}

impl TokenStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store holding one stored sequence per slice (ids 0, 1, …).
    pub fn from_seqs<S: AsRef<[Token]>>(seqs: &[S]) -> Self {
        let mut s = Self::new();
        for t in seqs {
            s.begin_seq();
            s.push_tokens(t.as_ref());
            s.end_seq();
        }
        s
    }

    /// Makes room for `seqs` more sequences made of `segments` more segments at most (a
    /// builder that knows its sizes spares the growth copies).
    pub fn reserve(&mut self, seqs: usize, segments: usize) {
        self.seqs.reserve(seqs);
        self.segments.reserve(segments);
    }

    /// Starts a new sequence; tokens pushed until [`end_seq`](Self::end_seq) belong to it.
    pub fn begin_seq(&mut self) {
        debug_assert!(self.open.is_none(), "begin_seq while a sequence is open");
        self.open = Some(SeqMeta { first_seg: self.segments.len() as u32, num_segs: 0, len: 0 });
    }

    /// Appends stored tokens to the open sequence.
    pub fn push_tokens(&mut self, tokens: &[Token]) {
        if tokens.is_empty() {
            return;
        }
        let start = self.arena.len();
        self.arena.extend_from_slice(tokens);
        self.push_segment(start, tokens.len() as u32, false);
    }

    /// Appends the run `base, base+1, …` of `len` tokens to the open sequence.
    pub fn push_run(&mut self, base: Token, len: u32) {
        if len > 0 {
            self.push_segment(base as usize, len, true);
        }
    }

    fn push_segment(&mut self, start: usize, len: u32, run: bool) {
        let meta = self.open.as_mut().expect("push outside begin_seq/end_seq");
        if meta.num_segs > 0 {
            let last = self.segments.last_mut().expect("open sequence has a segment");
            if last.run == run && last.start + last.len as usize == start {
                last.len += len;
                meta.len += len;
                return;
            }
        }
        self.segments.push(Segment { start, len, pos: meta.len, run });
        meta.num_segs += 1;
        meta.len += len;
    }

    /// Gives sequence `seq` the first token `first` in place of its own, the rest unchanged —
    /// in place (`copy` false) or as a new sequence whose id is returned. The sequence's
    /// segments are written anew at the end (the old ones stay, unused, when in place).
    pub fn with_first(&mut self, seq: SeqId, first: Token, copy: bool) -> SeqId {
        debug_assert!(self.open.is_none(), "with_first while a sequence is open");
        debug_assert!(self.sorted.get().is_none(), "the sorted order is computed once the store is built");
        let meta = self.seqs[seq as usize];
        let first_seg = self.segments.len() as u32;
        self.segments.push(Segment { start: first as usize, len: 1, pos: 0, run: true });
        for k in meta.first_seg..meta.first_seg + meta.num_segs {
            let mut s = self.segments[k as usize];
            if s.pos == 0 {
                // Drop its first token.
                if s.len == 1 {
                    continue;
                }
                s.start += 1;
                s.len -= 1;
                s.pos = 1;
            }
            self.segments.push(s);
        }
        let new = SeqMeta { first_seg, num_segs: self.segments.len() as u32 - first_seg, len: meta.len };
        if copy {
            self.seqs.push(new);
            (self.seqs.len() - 1) as SeqId
        } else {
            self.seqs[seq as usize] = new;
            seq
        }
    }

    /// Closes the open sequence and returns its id.
    pub fn end_seq(&mut self) -> SeqId {
        let meta = self.open.take().expect("end_seq without begin_seq");
        self.seqs.push(meta);
        (self.seqs.len() - 1) as SeqId
    }

    /// Number of tokens pushed so far into the open sequence.
    pub fn open_len(&self) -> usize {
        self.open.map_or(0, |m| m.len as usize)
    }

    /// Number of sequences.
    pub fn num_seqs(&self) -> usize {
        self.seqs.len()
    }

    /// Length of a sequence in tokens.
    pub fn seq_len(&self, seq: SeqId) -> usize {
        self.seqs[seq as usize].len as usize
    }

    /// Tokens held in the arena (materialised tokens only).
    pub fn stored_tokens(&self) -> usize {
        self.arena.len()
    }

    /// Approximate heap bytes used by the store.
    pub fn heap_bytes(&self) -> usize {
        self.arena.capacity() * 4
            + self.segments.capacity() * std::mem::size_of::<Segment>()
            + self.seqs.capacity() * std::mem::size_of::<SeqMeta>()
    }

    fn segs(&self, seq: SeqId) -> &[Segment] {
        let m = self.seqs[seq as usize];
        &self.segments[m.first_seg as usize..(m.first_seg + m.num_segs) as usize]
    }

    /// Iterates the chunks covering `seq[from..to]`.
    pub fn chunks(&self, seq: SeqId, from: usize, to: usize) -> Chunks<'_> {
        debug_assert!(from <= to && to <= self.seq_len(seq));
        let segs = self.segs(seq);
        let idx = segs.partition_point(|s| (s.pos as usize + s.len as usize) <= from);
        Chunks { store: self, segs, idx, pos: from, end: to }
    }

    /// Token at position `i` of a sequence.
    pub fn token(&self, seq: SeqId, i: usize) -> Token {
        self.chunks(seq, i, i + 1).next().expect("position inside the sequence").get(0)
    }

    /// Copies `seq[from..to]` into `out` (cleared first). For tests and small ranges.
    pub fn fill(&self, seq: SeqId, from: usize, to: usize, out: &mut Vec<Token>) {
        out.clear();
        for c in self.chunks(seq, from, to) {
            match c {
                Chunk::Slice(s) => out.extend_from_slice(s),
                Chunk::Run { base, len } => out.extend((0..len).map(|i| base.wrapping_add(i))),
            }
        }
    }

    /// Length of the longest common prefix of `a.0[a.1..]` and `b.0[b.1..]`, at most `max`.
    /// Works chunk by chunk: two runs compare in O(1).
    pub fn lcp(&self, a: (SeqId, usize), b: (SeqId, usize), max: usize) -> usize {
        self.first_difference(a, b, max).0
    }

    /// The longest common prefix of `a.0[a.1..]` and `b.0[b.1..]` (at most `max`) and, if they
    /// differ within `max` tokens of both, the two tokens where they do.
    fn first_difference(&self, a: (SeqId, usize), b: (SeqId, usize), max: usize) -> (usize, Option<(Token, Token)>) {
        let max = max.min(self.seq_len(a.0) - a.1).min(self.seq_len(b.0) - b.1);
        if max == 0 {
            return (0, None);
        }
        // Walk both sequences' segments side by side, a stretch common to two segments at a
        // time: two runs compare in O(1), two slices as slices.
        let (sa, sb) = (self.segs(a.0), self.segs(b.0));
        let seg_at = |segs: &[Segment], p: usize| match p {
            0 => 0,
            _ => segs.partition_point(|s| s.pos as usize + s.len as usize <= p),
        };
        let (mut ia, mut ib) = (seg_at(sa, a.1), seg_at(sb, b.1));
        let (mut pa, mut pb, mut done) = (a.1, b.1, 0);
        loop {
            let (x, y) = (&sa[ia], &sb[ib]);
            let (ox, oy) = (pa - x.pos as usize, pb - y.pos as usize);
            let n = (x.len as usize - ox).min(y.len as usize - oy).min(max - done);
            let same = match (x.run, y.run) {
                (true, true) => {
                    if self.seg_token(x, ox) == self.seg_token(y, oy) {
                        n
                    } else {
                        0
                    }
                }
                (false, false) => {
                    let (u, v) = (&self.arena[x.start + ox..][..n], &self.arena[y.start + oy..][..n]);
                    u.iter().zip(v).take_while(|(p, q)| p == q).count()
                }
                _ => (0..n).take_while(|&i| self.seg_token(x, ox + i) == self.seg_token(y, oy + i)).count(),
            };
            done += same;
            if same < n {
                return (done, Some((self.seg_token(x, ox + same), self.seg_token(y, oy + same))));
            }
            if done == max {
                return (done, None);
            }
            (pa, pb) = (pa + n, pb + n);
            ia += (pa == x.pos as usize + x.len as usize) as usize;
            ib += (pb == y.pos as usize + y.len as usize) as usize;
        }
    }

    /// Token at offset `o` of a segment.
    fn seg_token(&self, s: &Segment, o: usize) -> Token {
        if s.run {
            (s.start as Token).wrapping_add(o as u32)
        } else {
            self.arena[s.start + o]
        }
    }

    /// Lexicographic order of the prefixes `a.0[..a.1]` and `b.0[..b.1]` (a prefix first).
    pub fn cmp_prefixes(&self, a: (SeqId, usize), b: (SeqId, usize)) -> Ordering {
        match self.first_difference((a.0, 0), (b.0, 0), a.1.min(b.1)) {
            (_, Some((x, y))) => x.cmp(&y),
            (_, None) => a.1.cmp(&b.1),
        }
    }

    /// The sequences in lexicographic order (a prefix before its extensions, equal sequences by
    /// id) with the common prefix of each and its predecessor. Any two sequences share a
    /// prefix exactly as long as the smallest of these between them. Computed once.
    pub fn prefix_order(&self) -> &PrefixOrder {
        self.sorted.get_or_init(|| self.prefix_order_of((0..self.seqs.len() as SeqId).collect()))
    }

    /// [`prefix_order`](Self::prefix_order) of some of the sequences (computed, not kept).
    pub fn prefix_order_of(&self, mut order: Vec<SeqId>) -> PrefixOrder {
        let len = |s: SeqId| self.seq_len(s);
        order.par_sort_unstable_by(|&a, &b| self.cmp_prefixes((a, len(a)), (b, len(b))).then(a.cmp(&b)));
        let mut lcp_prev = vec![0u32; order.len()];
        for (k, w) in order.windows(2).enumerate() {
            lcp_prev[k + 1] = self.lcp((w[0], 0), (w[1], 0), usize::MAX) as u32;
        }
        PrefixOrder { order, lcp_prev }
    }

    /// Content fingerprint of `seq[from..from+len]` (`len <= MAX_BLOCK_TOKENS`): a polynomial
    /// hash modulo 2^61−1, the same for equal token contents however they are stored.
    pub fn fingerprint(&self, seq: SeqId, from: usize, len: usize) -> u64 {
        let t = tables();
        let mut acc: u64 = 0;
        let mut off = 0usize;
        for c in self.chunks(seq, from, from + len) {
            match c {
                Chunk::Slice(s) => {
                    for (j, &tok) in s.iter().enumerate() {
                        acc = add61(acc, mul61(tok as u64, t.pow[off + j]));
                    }
                }
                Chunk::Run { base, len } => {
                    let l = len as usize;
                    let inner = add61(mul61(base as u64, t.s0[l]), t.s1[l]);
                    acc = add61(acc, mul61(inner, t.pow[off]));
                }
            }
            off += c.len();
        }
        acc
    }
}

/// Iterator over the chunks of a sequence range.
pub struct Chunks<'a> {
    store: &'a TokenStore,
    segs: &'a [Segment],
    idx: usize,
    pos: usize,
    end: usize,
}

impl<'a> Iterator for Chunks<'a> {
    type Item = Chunk<'a>;
    fn next(&mut self) -> Option<Chunk<'a>> {
        if self.pos >= self.end {
            return None;
        }
        let s = self.segs[self.idx];
        let skip = self.pos - s.pos as usize;
        let take = (s.len as usize - skip).min(self.end - self.pos);
        self.pos += take;
        self.idx += 1;
        Some(if s.run {
            Chunk::Run { base: (s.start as Token).wrapping_add(skip as u32), len: take as u32 }
        } else {
            let a = s.start + skip;
            Chunk::Slice(&self.store.arena[a..a + take])
        })
    }
}

const P61: u64 = (1 << 61) - 1;
const BASE: u64 = 0x1f3d_5b79_a2c4_e681 % P61;

fn mul61(a: u64, b: u64) -> u64 {
    let p = a as u128 * b as u128;
    let r = ((p as u64) & P61) + ((p >> 61) as u64);
    if r >= P61 {
        r - P61
    } else {
        r
    }
}

fn add61(a: u64, b: u64) -> u64 {
    let r = a + b;
    if r >= P61 {
        r - P61
    } else {
        r
    }
}

struct Tables {
    /// BASE^j
    pow: Vec<u64>,
    /// Σ_{j<l} BASE^j
    s0: Vec<u64>,
    /// Σ_{j<l} j·BASE^j
    s1: Vec<u64>,
}

fn tables() -> &'static Tables {
    static T: std::sync::OnceLock<Tables> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        let n = MAX_BLOCK_TOKENS + 1;
        let mut pow = vec![1u64; n];
        for j in 1..n {
            pow[j] = mul61(pow[j - 1], BASE);
        }
        let (mut s0, mut s1) = (vec![0u64; n], vec![0u64; n]);
        for l in 1..n {
            s0[l] = add61(s0[l - 1], pow[l - 1]);
            s1[l] = add61(s1[l - 1], mul61((l - 1) as u64, pow[l - 1]));
        }
        Tables { pow, s0, s1 }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_first_token_keeps_the_rest() {
        let mut s = TokenStore::new();
        s.begin_seq();
        s.push_tokens(&[5, 6, 7]);
        s.push_run(100, 4);
        let a = s.end_seq();
        s.begin_seq();
        s.push_run(200, 3);
        let b = s.end_seq();
        let c = s.with_first(a, 9, true);
        let mut out = Vec::new();
        s.fill(c, 0, 7, &mut out);
        assert_eq!(out, vec![9, 6, 7, 100, 101, 102, 103]);
        s.fill(a, 0, 7, &mut out);
        assert_eq!(out, vec![5, 6, 7, 100, 101, 102, 103], "a copy leaves the original alone");
        assert_eq!(s.with_first(b, 1, false), b);
        s.fill(b, 0, 3, &mut out);
        assert_eq!(out, vec![1, 201, 202]);
        assert_eq!(s.lcp((a, 1), (c, 1), usize::MAX), 6);
        assert_eq!(s.fingerprint(c, 1, 6), s.fingerprint(a, 1, 6));
    }

    fn store_with(parts: &[&[Token]], runs: &[(Token, u32)]) -> (TokenStore, SeqId, SeqId) {
        let mut s = TokenStore::new();
        s.begin_seq();
        for p in parts {
            s.push_tokens(p);
        }
        let a = s.end_seq();
        s.begin_seq();
        for &(b, l) in runs {
            s.push_run(b, l);
        }
        let b = s.end_seq();
        (s, a, b)
    }

    /// Any two sequences share exactly the smallest common prefix of neighbours between them.
    fn check_prefix_order(s: &TokenStore) {
        let PrefixOrder { order, lcp_prev } = s.prefix_order();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..s.num_seqs() as SeqId).collect::<Vec<_>>(), "a permutation");
        for i in 0..order.len() {
            for j in i + 1..order.len() {
                let (a, b) = (order[i], order[j]);
                assert_ne!(s.cmp_prefixes((a, s.seq_len(a)), (b, s.seq_len(b))), Ordering::Greater, "sorted");
                let between = lcp_prev[i + 1..=j].iter().min().copied().unwrap() as usize;
                assert_eq!(s.lcp((a, 0), (b, 0), usize::MAX), between, "lcp of {a} and {b}");
            }
        }
    }

    #[test]
    fn prefix_order_gives_every_common_prefix() {
        let seqs: [&[Token]; 6] = [&[1, 2, 3, 4], &[1, 2, 5], &[9], &[1, 2, 3, 4], &[1, 2, 5, 7, 7], &[]];
        let s = TokenStore::from_seqs(&seqs);
        check_prefix_order(&s);
        assert_eq!(s.prefix_order().order, [5, 0, 3, 1, 4, 2]);
        assert_eq!(s.prefix_order().lcp_prev, [0, 0, 4, 2, 3, 0]);
        // A run shares with the same tokens stored as a slice.
        let (s, a, b) = store_with(&[&[5, 6, 7, 8]], &[(5, 3), (100, 1)]);
        check_prefix_order(&s);
        assert_eq!(s.lcp((a, 0), (b, 0), usize::MAX), 3);
        assert_eq!(s.prefix_order().lcp_prev, [0, 3]);
    }

    #[test]
    fn runs_and_slices_fingerprint_alike() {
        let (s, a, b) = store_with(&[&[5, 6, 7], &[8, 9, 20, 21]], &[(5, 5), (20, 2)]);
        assert_eq!(s.seq_len(a), 7);
        assert_eq!(s.seq_len(b), 7);
        for from in 0..7 {
            for len in 0..=(7 - from) {
                assert_eq!(s.fingerprint(a, from, len), s.fingerprint(b, from, len), "{from}+{len}");
            }
        }
        assert_ne!(s.fingerprint(a, 0, 3), s.fingerprint(a, 1, 3));
    }

    proptest::proptest! {
        /// Runs and slices, cut anywhere, compare as the tokens they stand for.
        #[test]
        fn lcp_and_order_match_the_tokens(
            parts in proptest::collection::vec(
                proptest::collection::vec((proptest::bool::ANY, 0u32..4, 1u32..4), 0..5), 2..5),
            from in (0usize..6, 0usize..6),
            max in 0usize..20,
        ) {
            let mut s = TokenStore::new();
            for seq in &parts {
                s.begin_seq();
                for &(run, base, len) in seq {
                    if run {
                        s.push_run(base, len);
                    } else {
                        s.push_tokens(&(base..base + len).collect::<Vec<_>>());
                    }
                }
                s.end_seq();
            }
            let toks: Vec<Vec<Token>> = (0..parts.len() as SeqId)
                .map(|q| {
                    let mut v = Vec::new();
                    s.fill(q, 0, s.seq_len(q), &mut v);
                    v
                })
                .collect();
            for a in 0..parts.len() {
                for b in 0..parts.len() {
                    let (i, j) = (from.0.min(toks[a].len()), from.1.min(toks[b].len()));
                    let want = toks[a][i..].iter().zip(&toks[b][j..]).take(max).take_while(|(x, y)| x == y).count();
                    proptest::prop_assert_eq!(s.lcp((a as SeqId, i), (b as SeqId, j), max), want);
                    let order = s.cmp_prefixes((a as SeqId, toks[a].len()), (b as SeqId, toks[b].len()));
                    proptest::prop_assert_eq!(order, toks[a].cmp(&toks[b]));
                }
            }
        }
    }

    #[test]
    fn lcp_across_chunk_kinds() {
        let (s, a, b) = store_with(&[&[5, 6, 7, 8, 9, 99]], &[(5, 5), (20, 2)]);
        assert_eq!(s.lcp((a, 0), (b, 0), 100), 5);
        assert_eq!(s.lcp((a, 1), (b, 1), 3), 3);
        assert_eq!(s.lcp((a, 0), (b, 1), 100), 0);
        assert_eq!(s.lcp((b, 0), (b, 0), 100), 7);
        let mut v = Vec::new();
        s.fill(b, 3, 7, &mut v);
        assert_eq!(v, vec![8, 9, 20, 21]);
        assert_eq!(s.token(b, 5), 20);
    }

    #[test]
    fn adjacent_runs_merge() {
        let (s, _, b) = store_with(&[], &[(0, 512), (512, 100)]);
        assert_eq!(s.segs(b).len(), 1);
        assert_eq!(s.seq_len(b), 612);
    }
}
