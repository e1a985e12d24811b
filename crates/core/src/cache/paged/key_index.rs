//! The paged cache's map from a block's content key to the oldest block carrying it (vLLM's
//! hash → block map), indexed by the key itself (keys are dense content ids). One instance of a
//! run touches most keys, so its map is one word per key, written up front; one instance of
//! many touches a small, scattered part of them, so its map is made of small chunks created on
//! the first write into them — its memory follows the keys it has seen, not the trace.

use super::IndexWord;

/// Keys per chunk of a sparse map (512 bytes of 16-bit words: about one request's run of keys).
const CHUNK: usize = 256;

/// Key → carrier, `W::NONE` for a key no block has carried (an entry may also name a block that
/// no longer carries the key: the cache checks the block's own key): one word per key, or (when
/// [`IndexWord::SPARSE`], decided at compile time so the dense map pays nothing for it) chunks.
pub(super) struct KeyIndex<W> {
    dense: Vec<W>,
    chunks: Vec<Option<Box<[W; CHUNK]>>>,
}

impl<W: IndexWord> KeyIndex<W> {
    /// A map of `keys` keys, every one carried by no block. A dense map is written now when
    /// `eager` (a run that touches most of it: calloc's lazily zeroed pages would cost two
    /// faults each when first read then written, scattered through the run), else left to them.
    pub(super) fn new(keys: usize, eager: bool) -> Self {
        if W::SPARSE {
            let chunks = std::iter::repeat_with(|| None).take(keys.div_ceil(CHUNK)).collect();
            return KeyIndex { dense: Vec::new(), chunks };
        }
        let dense = if eager {
            let mut v = Vec::with_capacity(keys);
            v.resize(keys, W::NONE);
            v
        } else {
            vec![W::NONE; keys]
        };
        KeyIndex { dense, chunks: Vec::new() }
    }

    #[inline]
    pub(super) fn get(&self, key: u32) -> W {
        if W::SPARSE {
            self.chunks[key as usize / CHUNK].as_ref().map_or(W::NONE, |c| c[key as usize % CHUNK])
        } else {
            self.dense[key as usize]
        }
    }

    #[inline]
    pub(super) fn set(&mut self, key: u32, w: W) {
        if !W::SPARSE {
            self.dense[key as usize] = w;
            return;
        }
        let slot = &mut self.chunks[key as usize / CHUNK];
        if slot.is_none() && w == W::NONE {
            return;
        }
        slot.get_or_insert_with(|| Box::new([W::NONE; CHUNK]))[key as usize % CHUNK] = w;
    }

    /// The map as one word per key, where it is kept so (not [`IndexWord::SPARSE`]).
    #[inline]
    pub(super) fn dense_mut(&mut self) -> Option<&mut [W]> {
        (!W::SPARSE).then_some(&mut self.dense[..])
    }

    /// Every key some block carries, with its carrier, in key order.
    pub(super) fn carried(&self) -> Vec<(u32, W)> {
        let dense = self.dense.iter().enumerate().filter(|(_, &w)| w != W::NONE).map(|(k, &w)| (k as u32, w));
        let sparse =
            self.chunks.iter().enumerate().filter_map(|(i, c)| c.as_ref().map(|c| (i, c))).flat_map(|(i, c)| {
                c.iter().enumerate().filter(|(_, &w)| w != W::NONE).map(move |(k, &w)| ((i * CHUNK + k) as u32, w))
            });
        dense.chain(sparse).collect()
    }

    /// Chunks made so far (a sparse map's memory).
    #[cfg(test)]
    fn chunks_made(&self) -> usize {
        self.chunks.iter().filter(|c| c.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both layouts answer alike; the sparse one makes a chunk only for a key written with a
    /// carrier.
    #[test]
    fn dense_and_sparse_agree() {
        use super::super::Sparse16;
        let (mut d, mut s) = (KeyIndex::<u16>::new(1000, true), KeyIndex::<Sparse16>::new(1000, false));
        for (k, w) in [(0u32, 5u32), (999, 7), (256, 9), (300, 0), (999, 0), (511, 3)] {
            d.set(k, u16::pack(w));
            s.set(k, Sparse16::pack(w));
        }
        for k in 0..1000 {
            assert_eq!(d.get(k).unpack(), s.get(k).unpack(), "key {k}");
        }
        let unpacked = |v: Vec<(u32, _)>| v.into_iter().map(|(k, w): (u32, u16)| (k, w as u32)).collect::<Vec<_>>();
        assert_eq!(unpacked(d.carried()), vec![(0, 5), (256, 9), (511, 3)]);
        assert_eq!(s.carried().into_iter().map(|(k, w)| (k, w.unpack())).collect::<Vec<_>>(), unpacked(d.carried()));
        assert_eq!((s.chunks.len(), s.chunks_made()), (4, 3), "chunks 0, 1 and 3 (999's, emptied)");
        assert!(d.chunks.is_empty() && s.dense.is_empty());
    }
}
