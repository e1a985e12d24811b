//! The CPU backend's rules chunk by chunk: recency refreshed by lookup hits only, pinned chunks
//! passed over by eviction, a save cut short when no slot can be had, and a held key saved again
//! taking a slot before giving it back.

use super::*;

/// A backend of `chunks` slots (8-token chunks of 4-token blocks).
fn backend(chunks: u64) -> Lmcache {
    Lmcache::new(OffloadConfig {
        backend: super::super::OffloadBackend::Lmcache,
        size_gib: 1.0,
        chunks,
        chunk_tokens: 8,
        block_tokens: 4,
        chunk_bytes_per_rank: 1000,
        link_bytes_per_s: 1e6,
    })
}

fn held(lm: &Lmcache) -> Vec<u32> {
    // Most recent first.
    let mut out = Vec::new();
    let mut s = lm.lru.mru();
    while s != NIL {
        out.push(lm.slots[s as usize].key);
        s = lm.lru.older(s);
    }
    out
}

#[test]
fn a_lookup_hit_is_the_only_refresh() {
    let mut lm = backend(3);
    assert_eq!(lm.store_keys(&[1, 2, 3]), 3);
    assert_eq!(held(&lm), vec![3, 2, 1]);
    // A lookup of [1, 2, 9]: two leading hits, pinned, moved up last chunk first.
    let mut keys = vec![1, 2, 9];
    assert_eq!(lm.hit_chunks(&mut keys), 2);
    assert_eq!(keys, vec![1, 2]);
    assert_eq!(held(&lm), vec![1, 2, 3]);
    for k in [1, 2] {
        let s = lm.held[&k];
        lm.slots[s as usize].pins -= 1;
    }
    // Saving a held key again refreshes nothing; a new one evicts the least recent.
    assert_eq!(lm.store_keys(&[4]), 1);
    assert_eq!(held(&lm), vec![4, 1, 2]);
    assert_eq!((lm.stats.tier.stored_chunks, lm.stats.tier.evicted_chunks), (4, 1));
    lm.check_invariants();
}

#[test]
fn eviction_passes_pinned_chunks_and_a_save_stops_when_nothing_is_free() {
    let mut lm = backend(3);
    lm.store_keys(&[1, 2, 3]);
    let mut keys = vec![1];
    lm.hit_chunks(&mut keys);
    // Order now 1 (pinned), 3, 2: the save of two evicts 2, then 3.
    assert_eq!(lm.store_keys(&[4, 5]), 2);
    assert_eq!(held(&lm), vec![5, 4, 1]);
    // Pin the rest: a save of two finds no slot at all, and is cut short (counted once).
    let mut keys = vec![1, 5, 4];
    lm.hit_chunks(&mut keys);
    assert_eq!(lm.store_keys(&[6, 7]), 0);
    assert_eq!(lm.stats.tier.refused_stores, 1);
    assert_eq!(lm.len(), 3);
    lm.check_invariants();
}

/// `LMCacheEngine.store` allocates before it asks whether the key is held: a full backend saving
/// [held 2, new 3] evicts two chunks — 2 among them — and puts both back as new.
#[test]
fn a_held_key_saved_again_takes_a_slot_first() {
    let mut lm = backend(2);
    lm.store_keys(&[1, 2]);
    assert_eq!(lm.store_keys(&[2, 3]), 2);
    assert_eq!(held(&lm), vec![3, 2]);
    assert_eq!((lm.stats.tier.stored_chunks, lm.stats.tier.evicted_chunks), (4, 2));
    // With room, the held key's slot is given back and the key keeps its place.
    let mut lm = backend(4);
    lm.store_keys(&[1, 2]);
    assert_eq!(lm.store_keys(&[1, 3]), 2);
    assert_eq!(held(&lm), vec![3, 2, 1]);
    assert_eq!((lm.stats.tier.stored_chunks, lm.stats.tier.evicted_chunks), (3, 0));
    assert_eq!(lm.free.len(), 1);
    lm.check_invariants();
}

/// The plain model: held chunks as (key, pins), most recent first; a save's slots counted.
#[derive(Default)]
struct Plain {
    held: Vec<(u32, u32)>,
    capacity: usize,
    stored: u64,
    evicted: u64,
    refused: u64,
}

impl Plain {
    fn store(&mut self, keys: &[u32]) -> usize {
        let mut taken = 0;
        for _ in keys {
            if self.held.len() + taken < self.capacity {
                taken += 1;
            } else if let Some(i) = self.held.iter().rposition(|&(_, pins)| pins == 0) {
                self.held.remove(i);
                self.evicted += 1;
                taken += 1;
            } else {
                self.refused += 1;
                break;
            }
        }
        for &k in &keys[..taken] {
            if !self.held.iter().any(|&(h, _)| h == k) {
                self.held.insert(0, (k, 0));
                self.stored += 1;
            }
        }
        taken
    }

    fn hit(&mut self, keys: &[u32]) -> usize {
        let hits = keys.iter().take_while(|&&k| self.held.iter().any(|&(h, _)| h == k)).count();
        for &k in keys[..hits].iter().rev() {
            let i = self.held.iter().position(|&(h, _)| h == k).expect("held");
            let (key, pins) = self.held.remove(i);
            self.held.insert(0, (key, pins + 1));
        }
        hits
    }

    fn unpin(&mut self, keys: &[u32]) {
        for &k in keys {
            self.held.iter_mut().find(|(h, _)| *h == k).expect("pinned chunks stay").1 -= 1;
        }
    }
}

proptest::proptest! {
    /// Saves, pinned lookups and their releases in any order leave the backend as the plain
    /// model: the same chunks in the same recency order, the same counts.
    #[test]
    fn the_backend_is_its_plain_model(
        capacity in 1u64..8,
        ops in proptest::collection::vec((0u8..3, proptest::collection::vec(0u32..12, 0..6)), 1..60),
    ) {
        let mut lm = backend(capacity);
        let mut plain = Plain { capacity: capacity as usize, ..Plain::default() };
        let mut pinned: Vec<Vec<u32>> = Vec::new();
        for (op, mut keys) in ops {
            keys.dedup();
            match op {
                0 => proptest::prop_assert_eq!(lm.store_keys(&keys), plain.store(&keys)),
                1 => {
                    let want = plain.hit(&keys);
                    proptest::prop_assert_eq!(lm.hit_chunks(&mut keys), want);
                    pinned.push(keys);
                }
                _ => {
                    if let Some(keys) = pinned.pop() {
                        plain.unpin(&keys);
                        for k in &keys {
                            let s = lm.held[k];
                            lm.slots[s as usize].pins -= 1;
                        }
                    }
                }
            }
            lm.check_invariants();
            proptest::prop_assert_eq!(held(&lm), plain.held.iter().map(|&(k, _)| k).collect::<Vec<_>>());
            let t = lm.stats.tier;
            proptest::prop_assert_eq!((t.stored_chunks, t.evicted_chunks, t.refused_stores), (plain.stored, plain.evicted, plain.refused));
        }
    }
}
