//! Hand-computed scenarios of SGLang's HiCache (`cache::hicache`) through the scheduler, with
//! the affine step-time model (0.01 s a step, 1 ms a prefill token) and copies of 1 ms a token:
//! a prefix the device evicted, kept on the host and loaded back in its request's prefill step
//! (the step lasting as long as the load); the writes acknowledged by an idle engine.

use super::tests::{rec, sglang_cfg, workload, COST};
use super::*;
use crate::cache::hicache::{HostTierConfig, WritePolicy};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// A 40-token device pool with, when `policy` is set, a 100-token host tier.
fn tiered(policy: Option<WritePolicy>) -> SimConfig {
    let mut c = sglang_cfg(8, 0, Some(40));
    c.engine.hicache = policy.map(|policy| HostTierConfig {
        policy,
        host_tokens: 100,
        token_bytes_per_rank: 1000,
        link_bytes_per_s: 1e6,
    });
    c
}

/// A (24 tokens) at 0, F (30 others) at 0.1, A' (A and 6 more) at 0.2; one output each.
fn evict_and_return() -> (Workload, Vec<(u32, f64)>) {
    let a: Vec<u32> = (0..24).collect();
    let a2: Vec<u32> = (0..30).collect();
    let w = workload(&[(a, 1), ((100..130).collect(), 1), (a2, 1)]);
    (w, vec![(0, 0.0), (1, 0.1), (2, 0.2)])
}

#[test]
fn a_prefix_the_device_evicted_is_loaded_back_within_its_prefill_step() {
    let (w, sends) = evict_and_return();
    // Without the tier: F evicts A; A' computes its 30 tokens, 0.01 + 0.030 = 0.040 s.
    let plain = run(&w, &sends, &tiered(None), &COST, Keep::default());
    assert!(close(rec(&plain, 2).ttft_s(), 0.040), "{:?}", rec(&plain, 2));
    assert!(plain.hicache.is_none());
    // With it: A is written after its step (submitted at 0.034, acknowledged at 0.058 by the
    // idle engine); F's admission keeps A on the host alone. A' finds 24 tokens on the host,
    // loads them (evicting F's device copy, written by then) and computes 6: 0.016 s of
    // compute, but the forward waits for the 24 ms load.
    let r = run(&w, &sends, &tiered(Some(WritePolicy::WriteThrough)), &COST, Keep::default());
    let b = rec(&r, 2);
    assert!(close(b.ttft_s(), 0.024), "{b:?}");
    assert_eq!(b.cached_prompt_tokens, 24, "loaded tokens count as cached, as SGLang's #cached-token does");
    let h = r.hicache.expect("the tier's figures");
    assert_eq!((h.loads, h.loaded_tokens, h.demoted_tokens), (1, 24, 54));
    assert_eq!(h.written_tokens, 24 + 30 + 6);
    assert!(close(h.load_s, 0.024) && close(h.write_s, 0.060), "{h:?}");
}

#[test]
fn a_write_in_flight_keeps_its_node_on_the_device() {
    // F arrives at 0.040, while A's write (0.034 to 0.058) is in flight: A is locked, F finds 16
    // free tokens of the 30 it needs and waits for the acknowledgement at 0.058.
    let (w, _) = evict_and_return();
    let sends = [(0, 0.0), (1, 0.040)];
    let r = run(&w, &sends, &tiered(Some(WritePolicy::WriteThrough)), &COST, Keep::default());
    let f = rec(&r, 1);
    assert!(close(f.first_token_s, 0.058 + 0.040), "{f:?}");
    // Write-back writes nothing until eviction, so F runs at once and waits for A's copy.
    let r = run(&w, &sends, &tiered(Some(WritePolicy::WriteBack)), &COST, Keep::default());
    let f = rec(&r, 1);
    assert!(close(f.first_token_s, 0.040 + 0.024 + 0.040), "{f:?}");
}

/// The bundled sample's sessions, a request every 0.2 s, through a 4,000-token device pool,
/// each write policy: the tier never holds more than its pool, loads count within the cached
/// prompt tokens, runs repeat byte for byte, and a device pool that never evicts loads nothing
/// and times every request as without the tier.
#[test]
fn the_sample_under_each_policy_keeps_the_tiers_consistent() {
    let w = crate::load_workload(None, &Default::default(), &Default::default()).expect("the sample");
    let sends: Vec<(u32, f64)> = (0..w.requests.len() as u32).map(|i| (i, i as f64 * 0.2)).collect();
    let with = |pool: u64, policy: Option<WritePolicy>| {
        let mut c = sglang_cfg(64, 2048, Some(pool));
        c.engine.hicache = policy.map(|policy| HostTierConfig {
            policy,
            host_tokens: 2 * pool + 1,
            token_bytes_per_rank: 131_072,
            link_bytes_per_s: 50e9,
        });
        run(&w, &sends, &c, &COST, Keep::default())
    };
    for policy in [WritePolicy::WriteThrough, WritePolicy::WriteThroughSelective, WritePolicy::WriteBack] {
        let r = with(4000, Some(policy));
        let h = r.hicache.expect("figures");
        assert!(h.peak_host_tokens <= 8001 && h.loads > 0, "{policy:?}: {h:?}");
        let cached: u64 = r.records.iter().map(|x| x.cached_prompt_tokens as u64).sum();
        assert!(h.loaded_tokens <= cached, "{policy:?}");
        let again = with(4000, Some(policy));
        assert_eq!(format!("{:?}", r.records), format!("{:?}", again.records), "{policy:?}: not repeatable");
        // Ample: nothing is evicted, so nothing is loaded and no request moves.
        let (plain, tiered) = (with(1 << 20, None), with(1 << 20, Some(policy)));
        assert_eq!(tiered.hicache.unwrap().loads, 0);
        assert_eq!(format!("{:?}", plain.records), format!("{:?}", tiered.records), "{policy:?}");
    }
}

/// Two instances behind round robin, HiCache with a storage tier (I/O at once, wait_complete):
/// A (300 tokens) on instance 0 at 0, the same prompt B on instance 1 at 1 s, after A's pages
/// were written. One store for both (Mooncake's) lets B read A's pages: 299 looked up (the
/// known tokens less the last) are found, read into instance 1's host pool and loaded with B's
/// prefill; with a store each (the file backend), B finds nothing and computes all 300.
#[test]
fn a_shared_store_gives_one_instance_the_pages_another_wrote() {
    use crate::cache::storage::{Eviction, PrefetchPolicy, StorageConfig};
    let prompt: Vec<u32> = (0..300).collect();
    let w = workload(&[(prompt.clone(), 1), (prompt, 1)]);
    let sends = [(0, 0.0), (1, 1.0)];
    let two = |shared: bool| {
        let mut c = sglang_cfg(8, 0, Some(1000));
        c.engine.hicache = Some(HostTierConfig {
            policy: WritePolicy::WriteThrough,
            host_tokens: 2001,
            token_bytes_per_rank: 1000,
            link_bytes_per_s: 1e9,
        });
        let storage = StorageConfig::new(PrefetchPolicy::WaitComplete);
        c.engine.hicache_storage = Some(match shared {
            true => StorageConfig { shared, eviction: Eviction::Mooncake, max_pages: Some(5000), ..storage },
            false => storage,
        });
        super::tests::round_robin_pair(&w, &sends, &c)
    };
    let (own, shared) = (two(false), two(true));
    for r in [&own, &shared] {
        assert_eq!(r.assigned[..2], [0, 1]);
    }
    let s = own.hicache.unwrap().storage.expect("storage figures");
    assert_eq!((s.hit_tokens, s.inserted_tokens), (0, 0), "{s:?}");
    // Each store lands its writes at its own instance's passes: instance 0 has none after A.
    assert_eq!((s.pages_written, s.pages_skipped), (0, 0), "{s:?}");
    assert_eq!(rec(&own, 1).cached_prompt_tokens, 0);
    let s = shared.hicache.unwrap().storage.expect("storage figures");
    assert_eq!((s.hit_tokens, s.inserted_tokens), (299, 299), "{s:?}");
    // The shared store lands A's 300 pages at instance 1's first pass (B's are in flight when
    // the run ends).
    assert_eq!((s.pages_written, s.pages_skipped), (300, 0), "{s:?}");
    let b = rec(&shared, 1);
    assert_eq!(b.cached_prompt_tokens, 299, "{b:?}");
    assert!(b.ttft_s() < rec(&own, 1).ttft_s() - 0.2, "{b:?} against {:?}", rec(&own, 1));
    assert_eq!(format!("{:?}", shared.records), format!("{:?}", two(true).records), "not repeatable");
}
