//! The CPU backend's rules chunk by chunk: recency refreshed by lookup hits only, pinned chunks
//! passed over by eviction, a save cut short when no slot can be had, and a held key saved again
//! taking a slot before giving it back.

use super::*;

/// A backend of `chunks` slots (8-token chunks of 4-token blocks).
fn backend(chunks: u64) -> Lmcache {
    Lmcache::new(scenario_config(chunks))
}

/// The CPU backend's chunks, most recent first.
fn held(lm: &Lmcache) -> Vec<u32> {
    lm.cpu.order()
}

/// A lookup's hits (pinned, the pins kept as request `id`'s, as a lookup keeps them), `keys`
/// cut to them.
fn look(lm: &mut Lmcache, id: u32, keys: &mut Vec<u32>) -> usize {
    let (on_cpu, on_disk) = lm.hit_chunks(keys);
    keys.truncate(on_cpu + on_disk);
    let st = lm.state(id);
    st.pinned_cpu.extend_from_slice(&keys[..on_cpu]);
    st.pinned_disk.extend_from_slice(&keys[on_cpu..]);
    on_cpu + on_disk
}

#[test]
fn a_lookup_hit_is_the_only_refresh() {
    let mut lm = backend(3);
    assert_eq!(lm.store_keys(&[1, 2, 3]), 3);
    assert_eq!(held(&lm), vec![3, 2, 1]);
    // A lookup of [1, 2, 9]: two leading hits, pinned, moved up last chunk first.
    let mut keys = vec![1, 2, 9];
    assert_eq!(look(&mut lm, 0, &mut keys), 2);
    assert_eq!(keys, vec![1, 2]);
    assert_eq!(held(&lm), vec![1, 2, 3]);
    lm.unpin(0);
    // Saving a held key again refreshes nothing; a new one evicts the least recent.
    assert_eq!(lm.store_keys(&[4]), 1);
    assert_eq!(held(&lm), vec![4, 1, 2]);
    assert_eq!((lm.stats().tier.stored_chunks, lm.stats().tier.evicted_chunks), (4, 1));
    lm.check_invariants();
}

#[test]
fn eviction_passes_pinned_chunks_and_a_save_stops_when_nothing_is_free() {
    let mut lm = backend(3);
    lm.store_keys(&[1, 2, 3]);
    let mut keys = vec![1];
    look(&mut lm, 0, &mut keys);
    // Order now 1 (pinned), 3, 2: the save of two evicts 2, then 3.
    assert_eq!(lm.store_keys(&[4, 5]), 2);
    assert_eq!(held(&lm), vec![5, 4, 1]);
    // Pin the rest: a save of two finds no slot at all, and is cut short (counted once).
    let mut keys = vec![1, 5, 4];
    look(&mut lm, 1, &mut keys);
    assert_eq!(lm.store_keys(&[6, 7]), 0);
    assert_eq!(lm.stats().tier.refused_stores, 1);
    assert_eq!(lm.cpu.len(), 3);
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
    assert_eq!((lm.stats().tier.stored_chunks, lm.stats().tier.evicted_chunks), (4, 2));
    // With room, the held key's slot is given back and the key keeps its place.
    let mut lm = backend(4);
    lm.store_keys(&[1, 2]);
    assert_eq!(lm.store_keys(&[1, 3]), 2);
    assert_eq!(held(&lm), vec![3, 2, 1]);
    assert_eq!((lm.stats().tier.stored_chunks, lm.stats().tier.evicted_chunks), (3, 0));
    assert_eq!(lm.cpu.free_slots(), 1);
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
                    proptest::prop_assert_eq!(look(&mut lm, pinned.len() as u32, &mut keys), want);
                    pinned.push(keys);
                }
                _ => {
                    if let Some(keys) = pinned.pop() {
                        plain.unpin(&keys);
                        lm.unpin(pinned.len() as u32);
                    }
                }
            }
            lm.check_invariants();
            proptest::prop_assert_eq!(held(&lm), plain.held.iter().map(|&(k, _)| k).collect::<Vec<_>>());
            let t = lm.stats().tier;
            proptest::prop_assert_eq!((t.stored_chunks, t.evicted_chunks, t.refused_stores), (plain.stored, plain.evicted, plain.refused));
        }
    }
}

/// A backend of `chunks` CPU slots and `disk` disk slots, 1 ms to write or read a chunk.
fn with_disk(chunks: u64, disk: u64) -> Lmcache {
    let mut lm = backend(chunks);
    lm.cfg.disk = Some(DiskConfig { size_gib: 1.0, chunks: disk, bytes_per_s: 1e6 });
    Lmcache::new(lm.cfg)
}

/// Saves are written through to disk when their step ends, one write after another, each
/// chunk's CPU copy pinned until its write ends; a lookup counts the CPU's leading chunks, then
/// the disk's, and a chunk still being written is on neither.
#[test]
fn saves_are_written_through_and_a_lookup_reads_on_past_the_cpu() {
    let mut lm = with_disk(2, 3);
    assert_eq!(lm.store_keys(&[1, 2]), 2);
    lm.priced(0.0, Some(1.0));
    let d = lm.disk.as_ref().expect("disk");
    assert_eq!(
        d.writing.iter().map(|&(end, k, _)| (k, (end * 1e6).round() as u64)).collect::<Vec<_>>(),
        vec![(1, 1_001_000), (2, 1_002_000)]
    );
    // Both CPU copies are pinned by their writes: a save finds no slot.
    assert_eq!(lm.store_keys(&[3]), 0);
    assert_eq!(lm.stats().tier.refused_stores, 1);
    // Chunk 1's write ends: its CPU copy may go.
    lm.settle(1.0015);
    assert_eq!(lm.store_keys(&[3]), 1);
    assert_eq!(held(&lm), vec![3, 2]);
    lm.priced(1.0015, Some(1.002));
    lm.check_invariants();
    // 1 and 2 on disk, 3 still being written (until 1.003).
    assert_eq!(look(&mut lm, 0, &mut vec![1, 2, 3]), 2);
    assert_eq!(lm.state(0).pinned_disk, vec![1, 2]);
    assert_eq!(lm.disk.as_ref().expect("disk").store.order(), vec![1, 2]);
    assert_eq!(look(&mut lm, 1, &mut vec![2, 3]), 2);
    assert_eq!(lm.state(1).pinned_cpu, vec![2, 3], "the CPU backend holds both");
    let d = lm.stats().disk.expect("disk");
    assert_eq!((d.written_chunks, d.skipped_writes, d.peak_chunks), (3, 0, 2));
    assert!((d.write_s - 0.003).abs() < 1e-12);
}

/// A chunk the disk holds is refreshed, not written again; one with no unpinned room is not
/// written at all.
#[test]
fn a_write_through_refreshes_or_skips() {
    let mut lm = with_disk(4, 1);
    lm.store_keys(&[1]);
    lm.priced(0.0, Some(0.0));
    lm.settle(1.0);
    // The disk is full with chunk 1, pinned by a lookup: chunk 2's write is skipped.
    assert_eq!(look(&mut lm, 0, &mut vec![1]), 1);
    lm.disk.as_mut().expect("disk").store.pin(1);
    lm.state(0).pinned_disk.push(1);
    lm.store_keys(&[1, 2]);
    lm.priced(1.0, Some(1.0));
    let d = lm.stats().disk.expect("disk");
    assert_eq!((d.written_chunks, d.skipped_writes, d.evicted_chunks), (1, 1, 0));
    lm.check_invariants();
}
