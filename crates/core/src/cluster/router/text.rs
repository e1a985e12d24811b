//! Token ids seen as the text a character-based router reads. Token `t` is rendered as one
//! symbol of `chars_per_token` characters, every character of which names `t` (so two
//! different tokens differ in every character position): a prompt of `L` tokens is `L × c`
//! characters, two renderings share a character prefix exactly as long as `c ×` their common
//! token prefix, and a chunk of characters `[a, b)` is equal in two prompts iff the tokens its
//! characters fall in — `a / c .. ⌈b / c⌉` — are equal (the phase inside the first and last
//! token is fixed by `a` and `b`). Chunk keys are content fingerprints of those token ranges
//! (`TokenStore::fingerprint`), never materialised text. Also the small fixed-width instance
//! sets the hash indexes keep per entry.

use crate::workload::tokens::MAX_BLOCK_TOKENS;
use crate::workload::{SeqId, TokenStore};

/// One chunk of a prompt's rendering: its key (equal for equal content) and its characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub key: u64,
    /// Characters in the chunk (`chunk_chars`, less for a final partial chunk).
    pub chars: u64,
}

/// The chunks of `seq[..prompt_len]` rendered at `chars_per_token`, `chunk_chars` characters
/// each; with `full_only`, a final partial chunk is dropped (AIBrix hashes only full blocks),
/// else it is kept (production-stack hashes `request[i:i+128]` to the end).
pub fn chunks<'a>(
    store: &'a TokenStore,
    seq: SeqId,
    prompt_len: usize,
    chars_per_token: u32,
    chunk_chars: u32,
    full_only: bool,
) -> impl Iterator<Item = Chunk> + 'a {
    let c = chars_per_token.max(1) as u64;
    let k = chunk_chars.max(1) as u64;
    let total = prompt_len as u64 * c;
    let n = if full_only { total / k } else { total.div_ceil(k) };
    (0..n).map(move |i| {
        let (a, b) = (i * k, ((i + 1) * k).min(total));
        let (from, to) = ((a / c) as usize, b.div_ceil(c) as usize);
        let fp = fingerprint(store, seq, from, to);
        Chunk { key: mix(fp ^ (b - a).wrapping_mul(0x9E37_79B9_7F4A_7C15)), chars: b - a }
    })
}

/// Content fingerprint of `seq[from..to]`, any length (pieces of at most
/// [`MAX_BLOCK_TOKENS`] folded in order).
pub fn fingerprint(store: &TokenStore, seq: SeqId, from: usize, to: usize) -> u64 {
    if to - from <= MAX_BLOCK_TOKENS {
        return store.fingerprint(seq, from, to - from);
    }
    let mut acc = 0u64;
    let mut at = from;
    while at < to {
        let len = (to - at).min(MAX_BLOCK_TOKENS);
        acc = mix(acc ^ store.fingerprint(seq, at, len));
        at += len;
    }
    acc
}

/// A 64-bit finaliser (splitmix64): spreads a fingerprint over all bits.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Sets of instances stored side by side: set `s` is `words` 64-bit words from `s × words`.
#[derive(Debug, Clone, Default)]
pub struct Sets {
    words: usize,
    bits: Vec<u64>,
}

impl Sets {
    /// Room for sets over `n` instances.
    pub fn new(n: usize) -> Self {
        Sets { words: n.div_ceil(64).max(1), bits: Vec::new() }
    }
    /// Words per set.
    pub fn words(&self) -> usize {
        self.words
    }
    /// Makes set `s` exist (empty) if it does not yet.
    pub fn ensure(&mut self, s: usize) {
        let need = (s + 1) * self.words;
        if self.bits.len() < need {
            self.bits.resize(need, 0);
        }
    }
    /// Empties set `s`.
    pub fn clear(&mut self, s: usize) {
        self.ensure(s);
        self.bits[s * self.words..(s + 1) * self.words].fill(0);
    }
    /// Adds instance `i` to set `s`.
    pub fn insert(&mut self, s: usize, i: usize) {
        self.ensure(s);
        self.bits[s * self.words + i / 64] |= 1 << (i % 64);
    }
    /// Whether set `s` holds `i`.
    pub fn contains(&self, s: usize, i: usize) -> bool {
        self.bits.get(s * self.words + i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }
    /// Makes set `to` a copy of set `from`.
    pub fn copy(&mut self, from: usize, to: usize) {
        self.ensure(from.max(to));
        let w = self.words;
        self.bits.copy_within(from * w..(from + 1) * w, to * w);
    }
    /// The words of set `s`.
    pub fn get(&self, s: usize) -> &[u64] {
        &self.bits[s * self.words..(s + 1) * self.words]
    }
}

/// Instances in a word slice, ascending.
pub fn members(words: &[u64]) -> impl Iterator<Item = usize> + '_ {
    words.iter().enumerate().flat_map(|(w, &bits)| {
        let mut b = bits;
        std::iter::from_fn(move || {
            (b != 0).then(|| {
                let i = b.trailing_zeros() as usize;
                b &= b - 1;
                w * 64 + i
            })
        })
    })
}
