//! Hand-computed scenarios for the router policies over a small token store and a fake view
//! of the instances, and a property test of every policy's bookkeeping.

use super::approx_tree::ApproxTree;
use super::kv_aware::KvAware;
use super::*;
use crate::workload::{Token, TokenStore};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};

/// Instances whose caches hold, for sequence `s`, `cached[i][s]` prompt tokens.
struct FakeView {
    cached: Vec<Vec<usize>>,
    blocks: Vec<u64>,
    down: Vec<bool>,
}

impl InstanceView for FakeView {
    fn num_instances(&self) -> usize {
        self.cached.len()
    }
    fn cached_prefix(&self, i: usize, seq: SeqId, known: usize) -> usize {
        self.cached[i].get(seq as usize).copied().unwrap_or(0).min(known)
    }
    fn held_tokens(&self, _i: usize) -> u64 {
        0
    }
    fn queued(&self, _i: usize) -> u32 {
        0
    }
    fn cached_blocks(&self, i: usize) -> u64 {
        self.blocks.get(i).copied().unwrap_or(0)
    }
    fn available(&self, i: usize) -> bool {
        !self.down.get(i).copied().unwrap_or(false)
    }
}

fn blank(n: usize) -> FakeView {
    FakeView { cached: vec![Vec::new(); n], blocks: vec![0; n], down: vec![false; n] }
}

fn arrival(store: &TokenStore, id: u32, seq: SeqId, now: f64) -> Arrival<'_> {
    Arrival { id, seq, prompt_len: store.seq_len(seq), store, now, lora: 0, priority: None }
}

/// `len` tokens `base, base+1, …`.
fn run(base: Token, len: usize) -> Vec<Token> {
    (0..len as Token).map(|i| base + i).collect()
}

fn cat(parts: &[Vec<Token>]) -> Vec<Token> {
    parts.concat()
}

#[test]
fn cache_aware_keeps_a_shared_prefix_group_on_one_worker_until_the_imbalance_rule_flips_it() {
    // 17 prompts: one 100-token system prompt + 4 tokens of their own; none finishes.
    let sys = run(1000, 100);
    let seqs: Vec<Vec<Token>> = (0..17).map(|k| cat(&[sys.clone(), run(5000 + 10 * k, 4)])).collect();
    let store = TokenStore::from_seqs(&seqs);
    let p = RouterParams { balance_abs_threshold: 2, balance_rel_threshold: 1.5, ..RouterParams::default() };
    let mut r = build(RouterKind::CacheAware, p, 2);
    let view = blank(2);
    let got: Vec<(usize, Basis)> = (0..17)
        .map(|k| {
            let d = r.route(&arrival(&store, k, k, 0.0), &view);
            (d.instance, d.basis)
        })
        .collect();
    // r0: empty tree → least load 0. r1, r2: 100/104 matched on worker 0 (loads 1:0, 2:0).
    // r3: 3 − 0 > 2 and 3 > 0 → imbalanced → worker 1. Then balanced (diff 2) → the matched
    // node's tenant, still worker 0, and imbalanced (diff 3, max > 1.5 min) → worker 1, in turn,
    // until loads 9:6 (9 > 9 is false: balanced, worker 0) and 10:6 → worker 1.
    let (p_, l_) = (Basis::Prefix, Basis::Load);
    let want = [
        (0, l_),
        (0, p_),
        (0, p_),
        (1, l_),
        (0, p_),
        (1, l_),
        (0, p_),
        (1, l_),
        (0, p_),
        (1, l_),
        (0, p_),
        (1, l_),
        (0, p_),
        (1, l_),
        (0, p_),
        (0, p_),
        (1, l_),
    ];
    assert_eq!(got, want);
    assert_eq!(r.in_flight(), Some(vec![10, 7]));
    for (k, (i, _)) in want.iter().enumerate() {
        r.finished(k as u32, *i, 1.0);
    }
    assert_eq!(r.in_flight(), Some(vec![0, 0]));
}

#[test]
fn cache_aware_fallback_least_load_versus_smallest_tree() {
    let store = TokenStore::from_seqs(&[run(1, 10), run(100, 5)]);
    let view = blank(2);
    for (fallback, second) in [(CacheAwareFallback::LeastLoad, 0), (CacheAwareFallback::SmallestTree, 1)] {
        let p = RouterParams { cache_aware_fallback: fallback, ..RouterParams::default() };
        let mut r = build(RouterKind::CacheAware, p, 2);
        // Both fallbacks start on worker 0 (equal loads, equal empty trees).
        assert_eq!(r.route(&arrival(&store, 0, 0, 0.0), &view).instance, 0);
        r.finished(0, 0, 1.0);
        // An unrelated prompt: loads 0:0 → worker 0; trees 40:0 characters → worker 1.
        let d = r.route(&arrival(&store, 1, 1, 2.0), &view);
        assert_eq!((d.instance, d.basis, d.predicted_hit_tokens), (second, Basis::Load, 0), "{fallback:?}");
    }
}

#[test]
fn eviction_removes_the_oldest_leaves_down_to_max_tree_size() {
    let a = vec![1, 2, 3, 4];
    let b = vec![1, 2, 5, 6];
    let c = vec![7, 8, 9];
    let store = TokenStore::from_seqs(&[a, b, c]);
    let mut t = ApproxTree::new(1, 1);
    // Epoch 0 registered the tenant; A's leaf gets 1; B splits it into [1 2] (epoch copied: 1)
    // over [3 4] (1) and B's leaf [5 6] (2); C's leaf gets 3. 4 + 2 + 3 = 9 characters.
    for s in 0..3 {
        t.insert(&store, s, store.seq_len(s), 0);
    }
    assert_eq!((t.tenant_chars(0), t.num_nodes()), (9, 5));
    // Down to 5: [3 4] (epoch 1) then [5 6] (epoch 2) leave; [1 2] becomes a leaf at 5 ≤ 5.
    t.evict(5);
    assert_eq!((t.tenant_chars(0), t.num_nodes()), (5, 3));
    assert_eq!(t.prefix_match(&store, 0, 4).tokens, 2);
    assert_eq!(t.prefix_match(&store, 2, 3).tokens, 3);
    // Down to 3: [1 2] (epoch 1) leaves before C (epoch 3).
    t.evict(3);
    assert_eq!((t.tenant_chars(0), t.num_nodes()), (3, 2));
    assert_eq!(t.prefix_match(&store, 1, 4), super::approx_tree::Match { tokens: 0, tenant: Some(0) });
    assert_eq!(t.prefix_match(&store, 2, 3).tokens, 3);
}

#[test]
fn cache_aware_evicts_on_its_interval_of_simulated_time() {
    let store = TokenStore::from_seqs(&[run(1, 10), run(100, 10)]);
    let view = blank(1);
    let p =
        RouterParams { chars_per_token: 2, max_tree_size: 20, eviction_interval_secs: 10.0, ..RouterParams::default() };
    let mut r = cache_aware::CacheAware::new(p, 1);
    r.route(&arrival(&store, 0, 0, 0.0), &view);
    r.route(&arrival(&store, 1, 1, 9.9), &view);
    assert_eq!(r.tree().tenant_chars(0), 40); // no tick yet
                                              // The tick at 10 s trims 40 characters to 20: seq 0's leaf (epoch 2) leaves, seq 1's
                                              // (epoch 4) stays; then seq 0 is inserted again.
    r.route(&arrival(&store, 2, 0, 10.0), &view);
    assert_eq!(r.tree().tenant_chars(0), 40);
    assert_eq!(r.tree().num_nodes(), 3);
}

#[test]
fn prefix_hash_picks_at_random_among_the_endpoints_of_the_longest_match() {
    // chars_per_token 4: a 128-character chunk is 32 tokens.
    let x = run(1, 64);
    let seqs = vec![x.clone(), cat(&[x[..32].to_vec(), run(900, 32)]), run(500, 64), run(700, 40), x.clone()];
    let store = TokenStore::from_seqs(&seqs);
    let view = blank(4);
    let p = RouterParams { seed: 7, ..RouterParams::default() };
    let mut r = build(RouterKind::PrefixHash, p, 4);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    // Seq 0: no match, uniform over all four endpoints.
    let e0: usize = rng.random_range(0..4usize);
    let d = r.route(&arrival(&store, 0, 0, 0.0), &view);
    assert_eq!((d.instance, d.basis, d.predicted_hit_tokens), (e0, Basis::Load, 0));
    // Seq 1 shares the first chunk: the only survivor is e0 (one draw over one endpoint).
    rng.random_range(0..1usize);
    let d = r.route(&arrival(&store, 1, 1, 0.0), &view);
    assert_eq!((d.instance, d.basis, d.predicted_hit_tokens), (e0, Basis::Prefix, 32));
    // Seqs 2 and 3: new first chunks, uniform again (seq 3 ends with a 32-character chunk).
    for s in [2, 3] {
        let e: usize = rng.random_range(0..4usize);
        assert_eq!(r.route(&arrival(&store, s, s, 0.0), &view).instance, e);
    }
    // Seq 4 repeats seq 0 whole: both chunks on e0.
    let d = r.route(&arrival(&store, 4, 4, 0.0), &view);
    assert_eq!((d.instance, d.predicted_hit_tokens), (e0, 64));
}

#[test]
fn prefix_hash_falls_back_to_least_load_below_the_minimum_match_and_still_inserts() {
    let x = run(1, 64);
    let seqs = vec![x.clone(), x.clone(), x.clone()];
    let store = TokenStore::from_seqs(&seqs);
    let view = blank(3);
    let p = RouterParams { prefix_min_match_length: 300, ..RouterParams::default() };
    let mut r = prefix_hash::PrefixHash::new(p, 3);
    // 0, then 256 matched characters < 300 each time: least load 0, 1, 2, each inserted.
    for s in 0..3 {
        let d = r.route(&arrival(&store, s, s, 0.0), &view);
        assert_eq!((d.instance, d.basis), (s as usize, Basis::Load));
    }
    assert_eq!(r.num_nodes(), 2); // the root and one leaf holding the three endpoints
    assert_eq!(r.in_flight(), Some(vec![1, 1, 1]));
}

#[test]
fn kv_aware_takes_the_lowest_cost_with_router_tracked_load() {
    // Prompt 0: 100 tokens, cached 32 / 0 / 64 on instances 0 / 1 / 2. Prompt 1: 48 tokens.
    let store = TokenStore::from_seqs(&[run(1, 100), run(500, 48)]);
    let view =
        FakeView { cached: vec![vec![32, 0], vec![0, 0], vec![64, 0]], blocks: vec![10, 5, 0], down: Vec::new() };
    let mut r = KvAware::new(RouterParams::default(), 3);
    // Costs: 68/16 + ⌈100/16⌉ = 11.25, 100/16 + 7 = 13.25, 36/16 + 7 = 9.25 → instance 2.
    assert_eq!((r.cost(0, 100, 2, 0), r.cost(1, 100, 0, 0), r.cost(2, 100, 4, 0)), (11.25, 13.25, 9.25));
    let d = r.route(&arrival(&store, 0, 0, 0.0), &view);
    assert_eq!((d.instance, d.basis, d.predicted_hit_tokens), (2, Basis::Prefix, 64));
    assert_eq!(r.tracked(), (vec![0, 0, 36], vec![0, 0, 100]));
    // Prompt 1: 3 + 3 = 6, 6, (36 + 48)/16 + ⌈148/16⌉ = 15.25: instances 0 and 1 tie;
    // instance 1 caches the fewest blocks. Nothing is cached anywhere: routed by load.
    let d = r.route(&arrival(&store, 1, 1, 0.0), &view);
    assert_eq!((d.instance, d.basis, d.predicted_hit_tokens), (1, Basis::Load, 0));
    // Request 0's prefill is done: instance 2 keeps its 100 in-flight tokens, no prefill.
    r.prefill_done(0, 2, 1.0);
    // Prompt 0 again: 68/16 + 7 = 11.25; (48 + 100)/16 + ⌈148/16⌉ = 19.25; on instance 2 the
    // whole prompt is already in flight: 36/16 + ⌈100/16⌉ = 9.25 → instance 2.
    let d = r.route(&arrival(&store, 2, 0, 1.0), &view);
    assert_eq!((d.instance, d.predicted_hit_tokens), (2, 64));
    assert_eq!(r.tracked(), (vec![0, 48, 36], vec![0, 48, 100]));
    // Request 0 leaves; request 2 still holds the prompt on instance 2.
    r.finished(0, 2, 2.0);
    assert_eq!(r.tracked(), (vec![0, 48, 36], vec![0, 48, 100]));
    for (id, i) in [(1, 1), (2, 2)] {
        r.finished(id, i, 2.0);
    }
    assert_eq!(r.tracked(), (vec![0, 0, 0], vec![0, 0, 0]));
}

const KINDS: [RouterKind; 7] = [
    RouterKind::RoundRobin,
    RouterKind::Random,
    RouterKind::LeastLoad,
    RouterKind::CacheAware,
    RouterKind::PrefixHash,
    RouterKind::Aibrix,
    RouterKind::KvAware,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Every decision names an instance, predicts no more than the prompt, and the router's
    /// in-flight counts go back to zero once every request has finished.
    #[test]
    fn decisions_are_in_range_and_loads_return_to_zero(
        n in 1usize..6,
        cpt in 1u32..6,
        prompts in proptest::collection::vec((0usize..4, 1usize..300), 1..40),
        finish_every in 1usize..5,
        seed in 0u64..1000,
    ) {
        // Four sequences sharing stretches: 0 and 1 share 200 tokens, 2 is 0's first half.
        let base = run(1, 200);
        let seqs = [
            cat(&[base.clone(), run(5000, 200)]),
            cat(&[base.clone(), run(6000, 200)]),
            base[..100].to_vec(),
            run(9000, 400),
        ];
        let mut store = TokenStore::new();
        let mut ids = Vec::new();
        for (s, len) in &prompts {
            let len = (*len).min(seqs[*s].len());
            store.begin_seq();
            store.push_tokens(&seqs[*s][..len]);
            ids.push(store.end_seq());
        }
        let view = FakeView {
            cached: (0..n).map(|i| ids.iter().map(|&s| (store.seq_len(s) / (i + 1)) & !15).collect()).collect(),
            blocks: (0..n as u64).collect(),
            down: vec![false; n],
        };
        for kind in KINDS {
            let p = RouterParams {
                chars_per_token: cpt,
                seed,
                balance_abs_threshold: 3,
                aibrix_imbalance_abs_count: 2,
                max_tree_size: 200,
                eviction_interval_secs: 0.5,
                ..RouterParams::default()
            };
            let mut r = build(kind, p, n);
            let mut open = Vec::new();
            for (k, &s) in ids.iter().enumerate() {
                let d = r.route(&arrival(&store, k as u32, s, k as f64 * 0.1), &view);
                prop_assert!(d.instance < n, "{kind:?}: {d:?}");
                prop_assert!(d.predicted_hit_tokens <= store.seq_len(s) as u64, "{kind:?}: {d:?}");
                open.push((k as u32, d.instance));
                if k % finish_every == 0 {
                    let (id, i) = open.remove(0);
                    r.prefill_done(id, i, k as f64 * 0.1);
                    r.finished(id, i, k as f64 * 0.1);
                }
            }
            for (id, i) in open {
                r.finished(id, i, 100.0);
            }
            if let Some(load) = r.in_flight() {
                prop_assert!(load.iter().all(|&l| l == 0), "{kind:?}: {load:?}");
            }
        }
        // kv-aware's own counts (prefill tokens, distinct in-flight tokens) also drain.
        let mut r = KvAware::new(RouterParams { seed, ..RouterParams::default() }, n);
        let mut open = Vec::new();
        for (k, &s) in ids.iter().enumerate() {
            let d = r.route(&arrival(&store, k as u32, s, 0.0), &view);
            open.push((k as u32, d.instance));
            if k % finish_every == 0 {
                let (id, i) = open.swap_remove(open.len() / 2);
                r.finished(id, i, 0.0);
            }
        }
        for (id, i) in open {
            r.prefill_done(id, i, 1.0);
            r.finished(id, i, 1.0);
        }
        prop_assert_eq!(r.tracked(), (vec![0; n], vec![0; n]));
    }

    /// While an instance is down no policy sends it a request, whatever the policy's own state
    /// says of it (its loads, its prefix index); back up, it may be chosen again, and the loads
    /// still drain to zero.
    #[test]
    fn no_policy_routes_to_an_instance_that_is_down(
        n in 2usize..6,
        prompts in proptest::collection::vec((0usize..3, 1usize..300), 1..40),
        victim in 0usize..6,
        at in 0usize..30,
        outage in 1usize..20,
        seed in 0u64..1000,
    ) {
        let base = run(1, 200);
        let seqs = [cat(&[base.clone(), run(5000, 200)]), cat(&[base.clone(), run(6000, 200)]), run(9000, 400)];
        let mut store = TokenStore::new();
        let mut ids = Vec::new();
        for (s, len) in &prompts {
            store.begin_seq();
            store.push_tokens(&seqs[*s][..(*len).min(seqs[*s].len())]);
            ids.push(store.end_seq());
        }
        let victim = victim % n;
        for kind in KINDS {
            let mut view = FakeView {
                cached: (0..n).map(|i| ids.iter().map(|&s| (store.seq_len(s) / (i + 1)) & !15).collect()).collect(),
                blocks: vec![0; n],
                down: vec![false; n],
            };
            let p = RouterParams { seed, balance_abs_threshold: 3, aibrix_imbalance_abs_count: 2, ..RouterParams::default() };
            let mut r = build(kind, p, n);
            let mut open: Vec<(u32, usize)> = Vec::new();
            for (k, &s) in ids.iter().enumerate() {
                if k == at {
                    // The victim fails: its requests leave the router's counts first.
                    for &(id, i) in open.iter().filter(|&&(_, i)| i == victim) {
                        r.finished(id, i, k as f64);
                    }
                    open.retain(|&(_, i)| i != victim);
                    r.instance_down(victim, k as f64);
                    view.down[victim] = true;
                }
                if k == at + outage && view.down[victim] {
                    r.instance_up(victim, k as f64);
                    view.down[victim] = false;
                }
                let d = r.route(&arrival(&store, k as u32, s, k as f64 * 0.1), &view);
                prop_assert!(d.instance < n && !view.down[d.instance], "{kind:?}: {d:?} while {victim} is down");
                open.push((k as u32, d.instance));
            }
            for (id, i) in open {
                r.finished(id, i, 100.0);
            }
            if let Some(load) = r.in_flight() {
                prop_assert!(load.iter().all(|&l| l == 0), "{kind:?}: {load:?}");
            }
        }
    }
}

#[test]
fn cache_aware_forgets_a_failed_worker_and_takes_it_back_empty() {
    // Worker 0 holds the shared prompt; it fails, so the same prompt matches nothing and goes
    // to worker 1; back up, worker 0 is in the tree again with no characters, and the prompt
    // now matches worker 1.
    let store = TokenStore::from_seqs(&[run(1, 40), run(1, 40), run(1, 40)]);
    let mut r = build(RouterKind::CacheAware, RouterParams::default(), 2);
    let mut view = blank(2);
    assert_eq!(r.route(&arrival(&store, 0, 0, 0.0), &view).instance, 0);
    r.finished(0, 0, 0.5);
    r.instance_down(0, 1.0);
    view.down[0] = true;
    let d = r.route(&arrival(&store, 1, 1, 1.0), &view);
    assert_eq!((d.instance, d.basis, d.predicted_hit_tokens), (1, Basis::Load, 0));
    r.instance_up(0, 2.0);
    view.down[0] = false;
    let d = r.route(&arrival(&store, 2, 2, 2.0), &view);
    assert_eq!((d.instance, d.basis), (1, Basis::Prefix));
}

#[test]
fn round_robin_and_random_pass_over_an_instance_that_is_down() {
    let store = TokenStore::from_seqs(&[run(1, 4)]);
    let mut view = blank(3);
    view.down[1] = true;
    let mut rr = build(RouterKind::RoundRobin, RouterParams::default(), 3);
    let got: Vec<usize> = (0..4).map(|k| rr.route(&arrival(&store, k, 0, 0.0), &view).instance).collect();
    assert_eq!(got, [0, 2, 0, 2]);
    let mut random = build(RouterKind::Random, RouterParams::default(), 3);
    let picks: Vec<usize> = (0..200).map(|k| random.route(&arrival(&store, k, 0, 0.0), &view).instance).collect();
    assert!(picks.contains(&0) && picks.contains(&2) && !picks.contains(&1));
}
