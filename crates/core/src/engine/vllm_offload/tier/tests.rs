//! The tier's rules by hand (rank order, finishes, whole-or-nothing stores, pins), and the tier
//! held to its plain model (`reference`) over random operations.

use super::reference::Reference;
use super::*;
use proptest::prelude::*;

/// What `t` holds for the leading chunks of `keys`.
fn look(t: &HostTier, keys: &[u32]) -> Found {
    t.lookup(|visit| {
        for &k in keys {
            if !visit(k) {
                break;
            }
        }
    })
}

/// `keys` at positions 0.. of one request.
fn at(keys: &[u32]) -> Vec<(u32, u32)> {
    keys.iter().enumerate().map(|(i, &k)| (k, i as u32)).collect()
}

fn ready(t: &mut HostTier, keys: &[u32], major: u64) {
    assert!(t.store(&at(keys), major, keys));
    t.stored(keys);
}

/// vLLM 0.31+ ranks: a request's tail goes first; a finish makes its head the most recent.
#[test]
fn eviction_takes_the_tail_of_the_oldest_rank_first() {
    let mut t = HostTier::new(4);
    let a = t.fresh_rank();
    ready(&mut t, &[10, 11, 12, 13], a);
    // Two new chunks: A's tail (13, 12) go.
    let d = t.fresh_rank();
    assert!(t.store(&at(&[20, 21]), d, &[20, 21]));
    assert_eq!(look(&t, &[10, 11, 12]), Found::Hits(2));
    assert_eq!(t.stats.evicted_chunks, 2);
    t.check_invariants();
}

#[test]
fn a_finished_request_outlives_an_older_running_one() {
    let mut t = HostTier::new(4);
    let a = t.fresh_rank();
    ready(&mut t, &[10, 11], a);
    let b = t.fresh_rank();
    ready(&mut t, &[20, 21], b);
    // A finishes: its chunks become the most recent; B's (running, older rank) go first.
    t.finished(&[10, 11], a);
    let c = t.fresh_rank();
    assert!(t.store(&at(&[30]), c, &[30]));
    assert_eq!(look(&t, &[20, 21]), Found::Hits(1));
    assert_eq!(look(&t, &[10, 11]), Found::Hits(2));
    t.check_invariants();
}

#[test]
fn a_store_that_does_not_fit_whole_is_refused_whole() {
    let mut t = HostTier::new(3);
    let a = t.fresh_rank();
    assert!(t.store(&at(&[1, 2]), a, &[1, 2])); // still being stored: not evictable
    assert!(!t.store(&at(&[3, 4]), a, &[3, 4]));
    assert_eq!((t.len(), t.stats.refused_stores), (2, 1));
    assert_eq!(look(&t, &[1, 2]), Found::Pending);
    t.stored(&[1, 2]);
    // Offered chunks are protected: 1 is offered again (held), so only 2 may go.
    assert!(!t.store(&at(&[3, 4, 5]), a, &[1, 3, 4, 5]));
    assert!(t.store(&at(&[3, 4]), a, &[1, 3, 4]));
    assert_eq!(look(&t, &[1]), Found::Hits(1));
    assert!(!t.contains(2));
    t.check_invariants();
}

#[test]
fn a_pinned_chunk_is_not_evicted() {
    let mut t = HostTier::new(2);
    let a = t.fresh_rank();
    ready(&mut t, &[1, 2], a);
    t.pin(&[1, 2]);
    assert_eq!(t.state(1), Some(State::Loading(1)));
    assert_eq!(look(&t, &[1, 2]), Found::Loading);
    assert!(!t.store(&at(&[3]), a, &[3]));
    t.unpin(&[1]);
    assert!(t.store(&at(&[3]), a, &[3]));
    assert!(!t.contains(1) && t.contains(2));
    t.unpin(&[2]);
    t.check_invariants();
}

/// One operation on a tier: stores of request `req`'s chunks `from..from + n` (the first five
/// positions shared by the requests of one group, the rest its own), a store's end, a load's
/// pin and unpin of a request's leading held chunks, a request's finish.
#[derive(Debug, Clone)]
enum Op {
    Store { req: u8, from: u8, n: u8 },
    Stored { job: u8 },
    Pin { req: u8, n: u8 },
    Unpin { job: u8 },
    Finish { req: u8 },
    Raise { req: u8, pos: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..8, 0u8..12, 1u8..6).prop_map(|(req, from, n)| Op::Store { req, from, n }),
        3 => (0u8..16).prop_map(|job| Op::Stored { job }),
        1 => (0u8..8, 1u8..6).prop_map(|(req, n)| Op::Pin { req, n }),
        1 => (0u8..16).prop_map(|job| Op::Unpin { job }),
        2 => (0u8..8).prop_map(|req| Op::Finish { req }),
        2 => (0u8..8, 0u8..17).prop_map(|(req, pos)| Op::Raise { req, pos }),
    ]
}

/// Request `req`'s chunk at `pos`.
fn key(req: u8, pos: u8) -> u32 {
    if pos < 5 {
        (req % 3) as u32 * 100 + pos as u32
    } else {
        1000 + req as u32 * 100 + pos as u32
    }
}

/// Every held chunk's state and rank.
fn snapshot(entries: impl Iterator<Item = (u32, State, Rank)>) -> Vec<(u32, State, Rank)> {
    let mut v: Vec<_> = entries.collect();
    v.sort_by_key(|x| x.0);
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn the_tier_evicts_as_its_plain_model(capacity in 1usize..24, ops in prop::collection::vec(op(), 1..120)) {
        let (mut t, mut r) = (HostTier::new(capacity), Reference::new(capacity));
        let mut majors = [0u64; 8];
        let (mut storing, mut loading): (Vec<Vec<u32>>, Vec<Vec<u32>>) = (Vec::new(), Vec::new());
        for op in ops {
            match op {
                Op::Store { req, from, n } => {
                    let offered: Vec<u32> = (from..from + n).map(|p| key(req, p)).collect();
                    let new: Vec<(u32, u32)> = (from..from + n)
                        .filter(|&p| !t.contains(key(req, p)))
                        .map(|p| (key(req, p), p as u32))
                        .collect();
                    if majors[req as usize] == 0 {
                        majors[req as usize] = t.fresh_rank();
                        prop_assert_eq!(r.fresh_rank(), majors[req as usize]);
                    }
                    let m = majors[req as usize];
                    let (a, b) = (t.store(&new, m, &offered), r.store(&new, m, &offered));
                    prop_assert_eq!(a, b);
                    if a && !new.is_empty() {
                        storing.push(new.iter().map(|x| x.0).collect());
                    }
                }
                Op::Stored { job } if !storing.is_empty() => {
                    let keys = storing.remove(job as usize % storing.len());
                    t.stored(&keys);
                    r.stored(&keys);
                }
                Op::Pin { req, n } => {
                    let keys: Vec<u32> = (0..n)
                        .map(|p| key(req, p))
                        .take_while(|&k| matches!(t.state(k), Some(State::Ready | State::Loading(_))))
                        .collect();
                    if !keys.is_empty() {
                        t.pin(&keys);
                        r.pin(&keys);
                        loading.push(keys);
                    }
                }
                Op::Unpin { job } if !loading.is_empty() => {
                    let keys = loading.remove(job as usize % loading.len());
                    t.unpin(&keys);
                    r.unpin(&keys);
                }
                Op::Finish { req } => {
                    let keys: Vec<u32> = (0..17).map(|p| key(req, p)).collect();
                    t.finished(&keys, majors[req as usize]);
                    r.finished(&keys);
                    majors[req as usize] = 0;
                }
                Op::Raise { req, pos } => {
                    if majors[req as usize] == 0 {
                        majors[req as usize] = t.fresh_rank();
                        prop_assert_eq!(r.fresh_rank(), majors[req as usize]);
                    }
                    t.raise(key(req, pos), majors[req as usize], pos as u32);
                    r.raise(key(req, pos), majors[req as usize], pos as u32);
                }
                Op::Stored { .. } | Op::Unpin { .. } => {}
            }
            t.check_invariants();
            prop_assert_eq!(t.stats, r.stats);
            prop_assert_eq!(
                snapshot(t.entries.iter().map(|(&k, e)| (k, e.state(), e.rank()))),
                snapshot(r.entries())
            );
        }
    }
}

/// The packed entry keeps every field apart: a rank past 32 bits, the largest pin count, and the
/// listed flag set and cleared under each state.
#[test]
fn an_entry_packs_its_fields_apart() {
    let ranks = [(0, 0), (1, u32::MAX), ((7u64 << 32) | 5, 3), (u64::MAX - 1, u32::MAX - 9)];
    let states = [State::Storing, State::Ready, State::Loading(1), State::Loading(LISTED - 2)];
    for r in ranks {
        for s in states {
            for listed in [false, true] {
                let mut e = Entry::new(s, r, listed);
                assert_eq!((e.rank(), e.state(), e.listed()), (r, s, listed));
                e.set_listed(!listed);
                assert_eq!((e.rank(), e.state(), e.listed()), (r, s, !listed));
                e.set_state(State::Ready);
                e.set_rank((r.0 ^ 1, r.1));
                assert_eq!((e.rank(), e.state(), e.listed()), ((r.0 ^ 1, r.1), State::Ready, !listed));
            }
        }
    }
    assert_eq!(std::mem::size_of::<(u32, Entry)>(), 20, "a map slot of 20 bytes");
}
