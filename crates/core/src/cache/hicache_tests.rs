//! Hand-computed scenarios for the radix cache's host tier ([`super::hicache`]), one per rule,
//! and a property test over random lifecycles with copies acknowledged at random times.

use super::conformance::{admit_or_apply, op_strategy, seqs_strategy, Live};
use super::hicache::{HostTierConfig, WritePolicy};
use super::radix::TreeCache;
use super::*;
use proptest::prelude::*;

/// A 40-token device pool, page 1, with a host tier of `host` tokens whose copies take a
/// microsecond per token.
fn tiered(st: &Arc<TokenStore>, policy: WritePolicy, host: u64) -> TreeCache {
    let mut c = TreeCache::sglang(st.clone(), 1, Some(40));
    let cfg = HostTierConfig { policy, host_tokens: host, token_bytes_per_rank: 1000, link_bytes_per_s: 1e9 };
    assert!(c.attach_host_tier(cfg));
    c
}

/// A (24 tokens), B (30, disjoint), A' (A then 6 more), A'' (A's first 8 then others).
fn store() -> Arc<TokenStore> {
    let a: Vec<u32> = (0..24).collect();
    let b: Vec<u32> = (100..130).collect();
    let a2: Vec<u32> = (0..30).collect();
    let a3: Vec<u32> = (0..8).chain(200..222).collect();
    Arc::new(TokenStore::from_seqs(&[a, b, a2, a3]))
}

/// The writes queued so far submitted at `t` and acknowledged at the next step, `t + 1`.
fn settle(c: &mut TreeCache, t: f64) {
    c.host_events(t);
    c.host_events(t + 1.0);
}

/// Runs request `req` on `seq` whole: admitted, computed, finished; returns its hit.
fn serve(c: &mut TreeCache, req: ReqId, seq: SeqId, len: usize) -> usize {
    let a = c.admit(req, seq, len, usize::MAX).expect("admitted");
    c.computed(req, len);
    c.finish(req);
    c.check_invariants();
    a.hit_tokens
}

#[test]
fn write_through_keeps_an_evicted_prefix_on_the_host_and_loads_it_back() {
    let st = store();
    let mut c = tiered(&st, WritePolicy::WriteThrough, 100);
    assert_eq!(serve(&mut c, 0, 0, 24), 0);
    // A's node is written at its insert and locked until the write is acknowledged.
    assert_eq!(c.usage().evictable_tokens, 0);
    settle(&mut c, 1.0);
    assert_eq!(c.usage().evictable_tokens, 24);
    // B needs 30 slots of 16 free: A's device copy goes, its host copy stays.
    assert_eq!(serve(&mut c, 1, 1, 30), 0);
    settle(&mut c, 3.0);
    assert_eq!(c.peek(2, 30), 0, "the device has lost A");
    let t = c.touch_tiers(2, 30);
    assert_eq!((t.hit, t.host), (0, 24));
    // A' loads A's 24 tokens back, B's device copy making room (written, so kept on the host).
    assert_eq!(serve(&mut c, 2, 2, 30), 24);
    let (loads, blocking) = c.take_host_copies();
    assert!((loads - 24e-6).abs() < 1e-12 && blocking == 0.0, "{loads} {blocking}");
    let s = c.host_tier_stats().unwrap();
    assert_eq!((s.loads, s.loaded_tokens, s.demoted_tokens, s.dropped_tokens), (1, 24, 54, 0));
    // A' wrote its own 6 new tokens; A and B were written once.
    assert_eq!(s.written_tokens, 24 + 30 + 6);
}

#[test]
fn write_back_writes_only_what_eviction_takes_and_waits_for_it() {
    let st = store();
    let mut c = tiered(&st, WritePolicy::WriteBack, 100);
    serve(&mut c, 0, 0, 24);
    assert_eq!(c.usage().evictable_tokens, 24, "no write, no lock");
    assert_eq!(c.host_tier_stats().unwrap().written_tokens, 0);
    serve(&mut c, 1, 1, 30);
    let (_, blocking) = c.take_host_copies();
    assert!((blocking - 24e-6).abs() < 1e-12, "the step waited for A's write: {blocking}");
    assert_eq!(serve(&mut c, 2, 2, 30), 24);
    let s = c.host_tier_stats().unwrap();
    assert_eq!((s.written_tokens, s.demoted_tokens, s.loaded_tokens), (54, 54, 24));
}

#[test]
fn selective_writes_on_the_second_pass_so_a_prefix_seen_once_is_dropped() {
    let st = store();
    let mut c = tiered(&st, WritePolicy::WriteThroughSelective, 100);
    serve(&mut c, 0, 0, 24);
    assert_eq!(c.host_tier_stats().unwrap().written_tokens, 0);
    serve(&mut c, 1, 1, 30);
    assert_eq!(c.host_tier_stats().unwrap().dropped_tokens, 24);
    assert_eq!(c.touch_tiers(2, 30).host, 0);
    // A prefix two requests insert is written at the second: A' after A.
    let mut c = tiered(&st, WritePolicy::WriteThroughSelective, 100);
    serve(&mut c, 0, 0, 24);
    assert_eq!(serve(&mut c, 2, 2, 30), 24);
    assert_eq!(c.host_tier_stats().unwrap().written_tokens, 24, "A's node, not A''s new 6 tokens");
}

#[test]
fn a_host_run_under_ten_tokens_is_recomputed() {
    let st = store();
    let mut c = tiered(&st, WritePolicy::WriteThrough, 100);
    serve(&mut c, 0, 0, 24);
    settle(&mut c, 1.0);
    serve(&mut c, 1, 1, 30);
    settle(&mut c, 3.0);
    // A'' shares A's first 8 tokens: a split leaves an 8-token host run, too short to load.
    assert_eq!(c.touch_tiers(3, 30).host, 8);
    assert_eq!(serve(&mut c, 3, 3, 30), 0);
    let s = c.host_tier_stats().unwrap();
    assert_eq!((s.loads, s.runs_recomputed), (0, 1));
}

#[test]
fn a_full_host_evicts_its_oldest_host_only_leaf() {
    let st = store();
    // Room for B's 30 only once A's host-only copy is evicted.
    let mut c = tiered(&st, WritePolicy::WriteThrough, 40);
    serve(&mut c, 0, 0, 24);
    settle(&mut c, 1.0);
    serve(&mut c, 1, 1, 30);
    let s = c.host_tier_stats().unwrap();
    assert_eq!((s.host_evicted_tokens, s.peak_host_tokens), (24, 30));
    assert_eq!(c.touch_tiers(2, 30).host, 0);
}

#[test]
fn writes_are_acknowledged_in_order_once_their_copy_ends() {
    let st = store();
    let mut c = tiered(&st, WritePolicy::WriteThrough, 100);
    serve(&mut c, 0, 0, 24);
    // Submitted at 1.0, the copy takes 24 µs: not done at the same instant.
    c.host_events(1.0);
    assert_eq!(c.usage().evictable_tokens, 0);
    c.host_events(1.0 + 23e-6);
    assert_eq!(c.usage().evictable_tokens, 0);
    c.host_events(1.0 + 25e-6);
    assert_eq!(c.usage().evictable_tokens, 24);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random lifecycles under each write policy, copies acknowledged at random times: the
    /// device pool and the host pool never overflow, pinned prefixes stay on the device, and
    /// an idle cache with its copies acknowledged holds nothing pinned.
    #[test]
    fn random_operations_keep_both_tiers_consistent(
        seqs in seqs_strategy(),
        ops in prop::collection::vec((op_strategy(), prop::bool::ANY), 1..60),
        capacity in 8u64..120,
        host in 1u64..200,
        page in prop::sample::select(vec![1u32, 4]),
    ) {
        let st = Arc::new(TokenStore::from_seqs(&seqs));
        for policy in [WritePolicy::WriteThrough, WritePolicy::WriteThroughSelective, WritePolicy::WriteBack] {
            let mut c = TreeCache::sglang(st.clone(), page, Some(capacity));
            let host_tokens = host.div_ceil(page as u64) * page as u64;
            let cfg = HostTierConfig { policy, host_tokens, token_bytes_per_rank: 100, link_bytes_per_s: 1e6 };
            c.attach_host_tier(cfg);
            let mut live: Vec<Option<Live>> = vec![None; 6];
            let mut now = 0.0;
            for (op, tick) in &ops {
                if *tick {
                    now += 1e-3;
                    c.host_events(now);
                    c.take_host_copies();
                }
                admit_or_apply(&mut c, op, &mut live, &st, page as usize)?;
                let u = c.usage();
                prop_assert!(u.used_tokens <= capacity, "{policy:?}: used {} > {capacity}", u.used_tokens);
                let s = c.host_tier_stats().unwrap();
                prop_assert!(s.peak_host_tokens <= host_tokens);
                c.check_invariants();
                for &Live { seq, hit, .. } in live.iter().flatten() {
                    prop_assert!(c.peek(seq, hit + 1) >= hit, "{policy:?}: a pinned prefix left the device");
                }
            }
            for (req, l) in live.iter().enumerate() {
                if l.is_some() {
                    c.finish(req as ReqId);
                }
            }
            c.host_events(f64::MAX);
            c.check_invariants();
            let u = c.usage();
            prop_assert_eq!(u.used_tokens, u.evictable_tokens, "{:?}: idle cache holds pinned KV", policy);
        }
    }
}
