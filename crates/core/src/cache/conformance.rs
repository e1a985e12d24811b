//! One conformance suite run against every cache: hand-computed hits per engine rule, property
//! tests over random operation sequences (capacity never exceeded, pinned prefixes never
//! evicted, slots and blocks conserved, a hit never above prompt − 1), and the cross-model
//! check (unlimited capacity, block/page 1, one request at a time → identical hits).

use super::*;
use crate::replay::{replay, ReplayOptions};
use crate::workload::{Request, TraceInfo, Workload};
use proptest::prelude::*;

/// Every cache configuration under test.
fn all_specs(capacity: Option<u64>) -> Vec<CacheSpec> {
    let s = |policy, block_size, page_size| CacheSpec {
        policy,
        block_size,
        page_size,
        capacity_tokens: capacity,
        hybrid: None,
        sglang_pool: None,
    };
    vec![
        s(Policy::Paged, Some(1), None),
        s(Policy::Paged, Some(4), None),
        s(Policy::Radix, None, Some(1)),
        s(Policy::Radix, None, Some(4)),
        s(Policy::Token, None, None),
        s(Policy::None, None, None),
    ]
}

fn store(seqs: &[Vec<u32>]) -> Arc<TokenStore> {
    Arc::new(TokenStore::from_seqs(seqs))
}

/// Alignment unit of a spec (1 for token-level caches).
fn unit(spec: &CacheSpec) -> usize {
    spec.block_size.or(spec.page_size).unwrap_or(1) as usize
}

#[test]
fn first_request_never_hits() {
    let st = store(&[(0..40).collect()]);
    for spec in all_specs(None) {
        let mut c = spec.build(st.clone());
        assert_eq!(c.peek(0, 40), 0, "{spec:?}");
        assert_eq!(c.admit(0, 0, 40, usize::MAX).unwrap().hit_tokens, 0, "{spec:?}");
        c.check_invariants();
    }
}

#[test]
fn repeat_hits_all_but_the_last_token_aligned() {
    // A 37-token sequence; request 0 computes prompt 30 + output 7 (36 tokens of KV).
    let st = store(&[(0..37).collect()]);
    for spec in all_specs(None) {
        let mut c = spec.build(st.clone());
        c.admit(0, 0, 30, usize::MAX).unwrap();
        c.computed(0, 30);
        assert!(c.grow(0, 36));
        c.computed(0, 36);
        c.finish(0);
        c.check_invariants();
        // Same 30-token prompt again: at most 29 tokens, rounded down to the unit.
        let want = if spec.policy == Policy::None { 0 } else { 29 / unit(&spec) * unit(&spec) };
        assert_eq!(c.peek(0, 30), want, "{spec:?}");
        assert_eq!(c.admit(1, 0, 30, usize::MAX).unwrap().hit_tokens, want, "{spec:?}");
        c.finish(1);
        // The whole 37-token sequence: the first 36 tokens' KV exists (outputs included).
        let want = if spec.policy == Policy::None { 0 } else { 36 / unit(&spec) * unit(&spec) };
        assert_eq!(c.peek(0, 37), want, "{spec:?}");
    }
}

#[test]
fn when_kv_becomes_shareable_follows_each_engine() {
    // Two requests with the same 20-token prompt, both in flight.
    let st = store(&[(0..24).collect()]);
    for spec in all_specs(None) {
        let mut c = spec.build(st.clone());
        c.admit(0, 0, 20, usize::MAX).unwrap();
        let before_step = c.peek(0, 20);
        c.computed(0, 20); // prefill step done
        let after_prefill = c.peek(0, 20);
        let expect = match spec.policy {
            // vLLM: hashed at allocation → shareable within the same step.
            Policy::Paged => (19 / unit(&spec) * unit(&spec), 19 / unit(&spec) * unit(&spec)),
            // SGLang: after the prefill step.
            Policy::Radix => (0, 19 / unit(&spec) * unit(&spec)),
            // LightLLM: only at finish.
            Policy::Token | Policy::None => (0, 0),
        };
        assert_eq!((before_step, after_prefill), expect, "{spec:?}");
        c.finish(0);
        let at_finish = c.peek(0, 20);
        let expect = if spec.policy == Policy::None { 0 } else { 19 / unit(&spec) * unit(&spec) };
        assert_eq!(at_finish, expect, "{spec:?}");
        c.check_invariants();
    }
}

#[test]
fn unlimited_capacity_never_evicts_and_release_keeps_content() {
    let seqs: Vec<Vec<u32>> = (0..10).map(|i| (i * 100..i * 100 + 50).collect()).collect();
    let st = store(&seqs);
    for spec in all_specs(None) {
        let mut c = spec.build(st.clone());
        for i in 0..10 {
            c.admit(i, i, 50, usize::MAX).unwrap();
            c.computed(i, 50);
            c.finish(i);
        }
        assert_eq!(c.stats().evicted_tokens, 0, "{spec:?}");
        if spec.policy != Policy::None {
            assert!(c.usage().evictable_tokens > 0, "{spec:?}");
            assert_eq!(
                c.usage().used_tokens,
                c.usage().evictable_tokens,
                "{spec:?}: idle cache holds only evictable KV"
            );
        }
        c.check_invariants();
    }
}

/// vLLM 0.33's whole-sequence admission, on every cache: the reservation counts free slots
/// and evictable entries, a hit that is itself evictable counting as taken; refused, nothing is
/// pinned or allocated; granted, only the chunk is allocated.
#[test]
fn admission_reserving_the_whole_sequence() {
    // 64 slots. Request 1 is pinned (16 tokens); request 0's 32-token prompt is cached and
    // evictable; request 2 shares its first 16 tokens and has 48 in all.
    let seqs: Vec<Vec<u32>> =
        vec![(0..32).collect(), (500..516).collect(), (0..16).chain(900..932).collect::<Vec<u32>>()];
    let st = store(&seqs);
    for spec in all_specs(Some(64)) {
        let mut c = spec.build(st.clone());
        c.admit(0, 0, 32, usize::MAX).unwrap();
        c.computed(0, 32);
        c.finish(0);
        c.admit(1, 1, 16, usize::MAX).unwrap();
        c.computed(1, 16);
        let hit = c.peek(2, 48);
        assert_eq!(hit, if spec.policy == Policy::None { 0 } else { 16 }, "{spec:?}");
        // 48 slots are free or evictable, the hit among them: the whole 48 tokens fit, 49 do not.
        let used = c.usage();
        assert!(c.admit_reserving(2, 2, 48, 8, 49).is_none(), "{spec:?}");
        assert_eq!(c.usage(), used, "{spec:?}: a refusal changes nothing");
        c.check_invariants();
        let a = c.admit_reserving(2, 2, 48, 8, 48).unwrap_or_else(|| panic!("{spec:?}: the whole sequence fits"));
        assert_eq!((a.hit_tokens, a.allocated_tokens), (hit, hit + 8), "{spec:?}: only the chunk is allocated");
        c.check_invariants();
    }
}

#[test]
fn memory_pressure_evicts_unpinned_and_fails_cleanly() {
    let seqs: Vec<Vec<u32>> = (0..4).map(|i| (i * 100..i * 100 + 32).collect()).collect();
    let st = store(&seqs);
    for spec in all_specs(Some(64)) {
        let mut c = spec.build(st.clone());
        // Pin request 0 (32 tokens), cache request 1, then request 2 must evict request 1.
        c.admit(0, 0, 32, usize::MAX).unwrap();
        c.computed(0, 32);
        c.admit(1, 1, 32, usize::MAX).unwrap();
        c.computed(1, 32);
        c.finish(1);
        let a = c.admit(2, 2, 32, usize::MAX);
        assert!(a.is_some(), "{spec:?}");
        assert!(c.usage().used_tokens <= 64, "{spec:?}");
        // Request 3 cannot fit while 0 and 2 are pinned; nothing changes.
        let used = c.usage();
        assert!(c.admit(3, 3, 32, usize::MAX).is_none(), "{spec:?}");
        assert_eq!(c.usage(), used, "{spec:?}");
        // The pinned request's prefix survived.
        if spec.policy == Policy::Paged || spec.policy == Policy::Radix {
            assert_eq!(c.peek(0, 32), 31 / unit(&spec) * unit(&spec), "{spec:?}");
        }
        c.check_invariants();
    }
}

/// A workload over explicit token sequences, one request per (seq, prompt, output).
fn workload(seqs: &[Vec<u32>], reqs: &[(u32, u32, u32)]) -> Workload {
    let info = TraceInfo {
        path: "test".into(),
        format: crate::trace::Format::Native,
        tokenizer: None,
        turns: None,
        trace_block_size: None,
        records: reqs.len(),
        requests: reqs.len(),
        sessions: 0,
        prompt_tokens: 0,
        output_tokens: 0,
        stored_tokens: 0,
        adapters: Vec::new(),
        skipped: Default::default(),
        notes: vec![],
    };
    let requests = reqs
        .iter()
        .map(|&(seq, prompt_len, output_len)| Request {
            seq,
            prompt_len,
            output_len,
            arrival_ms: None,
            session: None,
            prev_turn: None,
            ignore_eos: true,
            priority: None,
            lora: 0,
        })
        .collect();
    Workload { store: store(seqs), requests, info, sample: None }
}

/// Sequences built from a few shared pieces, so prefixes repeat.
pub(super) fn seqs_strategy() -> impl Strategy<Value = Vec<Vec<u32>>> {
    let pieces = prop::collection::vec(prop::collection::vec(0u32..50, 1..12), 5);
    (pieces, prop::collection::vec(prop::collection::vec(0usize..5, 1..5), 1..8)).prop_map(|(pieces, picks)| {
        picks.iter().map(|p| p.iter().flat_map(|&i| pieces[i].iter().copied()).collect()).collect()
    })
}

/// One step of a random request lifecycle (shared with the paged cache's model check).
#[derive(Debug, Clone)]
pub(super) enum Op {
    Admit {
        seq: usize,
        known_frac: f64,
        chunk: usize,
    },
    Computed {
        req: usize,
    },
    Grow {
        req: usize,
        by: usize,
    },
    Finish {
        req: usize,
    },
    Preempt {
        req: usize,
    },
    /// Try the last refused admission again (an engine retries its queue head every step).
    Retry,
}

pub(super) fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0usize..8, 0.0f64..1.0, 1usize..40).prop_map(|(seq, known_frac, chunk)| Op::Admit { seq, known_frac, chunk }),
        2 => (0usize..6).prop_map(|req| Op::Computed { req }),
        2 => (0usize..6, 1usize..10).prop_map(|(req, by)| Op::Grow { req, by }),
        2 => (0usize..6).prop_map(|req| Op::Finish { req }),
        1 => (0usize..6).prop_map(|req| Op::Preempt { req }),
        2 => Just(Op::Retry),
    ]
}

/// A request holding KV in a random lifecycle.
#[derive(Clone, Copy)]
pub(super) struct Live {
    pub seq: SeqId,
    pub hit: usize,
    pub allocated: usize,
}

/// Applies a lifecycle step other than an admission to the live requests (a step for a request
/// not holding KV does nothing).
pub(super) fn apply(c: &mut dyn PrefixCache, op: &Op, live: &mut [Option<Live>], st: &TokenStore) {
    match *op {
        Op::Computed { req } => {
            if let Some(l) = live[req] {
                c.computed(req as ReqId, l.allocated);
            }
        }
        Op::Grow { req, by } => {
            if let Some(l) = live[req].as_mut() {
                let total = (l.allocated + by).min(st.seq_len(l.seq));
                if c.grow(req as ReqId, total) {
                    l.allocated = total;
                }
            }
        }
        Op::Finish { req } => {
            if live[req].take().is_some() {
                c.finish(req as ReqId);
            }
        }
        Op::Preempt { req } => {
            if live[req].take().is_some() {
                c.preempt(req as ReqId);
            }
        }
        Op::Admit { .. } | Op::Retry => {}
    }
}

/// Runs one lifecycle step: an admission into the first free slot of `live` (its hit below the
/// known tokens and whole pages of `page`), or [`apply`] for the others.
pub(super) fn admit_or_apply(
    c: &mut dyn PrefixCache,
    op: &Op,
    live: &mut [Option<Live>],
    st: &TokenStore,
    page: usize,
) -> Result<(), TestCaseError> {
    let Op::Admit { seq, known_frac, chunk } = *op else {
        apply(c, op, live, st);
        return Ok(());
    };
    let Some(slot) = live.iter().position(Option::is_none) else { return Ok(()) };
    let seq = (seq % st.num_seqs()) as SeqId;
    let known = 1 + ((st.seq_len(seq) - 1) as f64 * known_frac) as usize;
    if let Some(a) = c.admit(slot as ReqId, seq, known, chunk) {
        prop_assert!(a.hit_tokens < known);
        prop_assert_eq!(a.hit_tokens % page, 0);
        live[slot] = Some(Live { seq, hit: a.hit_tokens, allocated: a.allocated_tokens });
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Random lifecycles: invariants hold after every operation for every cache.
    #[test]
    fn random_operations_keep_invariants(
        seqs in seqs_strategy(),
        ops in prop::collection::vec(op_strategy(), 1..60),
        capacity in prop::option::of(8u64..120),
    ) {
        let st = store(&seqs);
        for spec in all_specs(capacity) {
            let mut c = spec.build(st.clone());
            let mut live: Vec<Option<Live>> = vec![None; 6];
            let mut refused: Option<(usize, SeqId, usize, usize)> = None;
            for op in &ops {
                let attempt = match *op {
                    Op::Admit { seq, known_frac, chunk } => {
                        let Some(slot) = live.iter().position(Option::is_none) else { continue };
                        let seq = (seq % seqs.len()) as SeqId;
                        let len = st.seq_len(seq);
                        Some((slot, seq, 1 + ((len - 1) as f64 * known_frac) as usize, chunk))
                    }
                    Op::Retry => refused.filter(|r| live[r.0].is_none()),
                    _ => None,
                };
                match *op {
                    Op::Admit { .. } | Op::Retry => {
                        let Some((slot, seq, known, chunk)) = attempt else { continue };
                        refused = None;
                        if let Some(a) = c.admit(slot as ReqId, seq, known, chunk) {
                            prop_assert!(a.hit_tokens < known, "{spec:?}: hit {} of {known}", a.hit_tokens);
                            prop_assert_eq!(a.hit_tokens % unit(&spec), 0, "{:?}: unaligned hit", spec);
                            prop_assert!(a.allocated_tokens <= known && a.allocated_tokens > a.hit_tokens);
                            live[slot] = Some(Live { seq, hit: a.hit_tokens, allocated: a.allocated_tokens });
                        } else {
                            refused = Some((slot, seq, known, chunk));
                        }
                    }
                    _ => apply(c.as_mut(), op, &mut live, &st),
                }
                let u = c.usage();
                if let Some(cap) = u.capacity_tokens {
                    prop_assert!(u.used_tokens <= cap, "{spec:?}: used {} > capacity {cap}", u.used_tokens);
                }
                prop_assert!(u.evictable_tokens <= u.used_tokens);
                c.check_invariants();
                // Pinned prefixes are never evicted.
                for l in live.iter().flatten() {
                    prop_assert!(c.peek(l.seq, l.hit + 1) >= l.hit, "{spec:?}: a pinned prefix was evicted");
                }
            }
            for (req, l) in live.iter().enumerate() {
                if l.is_some() {
                    c.finish(req as ReqId);
                }
            }
            c.check_invariants();
            let u = c.usage();
            prop_assert_eq!(u.used_tokens, u.evictable_tokens, "{:?}: idle cache holds pinned KV", spec);
        }
    }

    /// Unlimited capacity, block/page 1, one request at a time: paged, radix and token agree.
    #[test]
    fn cross_model_hits_agree(seqs in seqs_strategy(), picks in prop::collection::vec((0usize..8, 0.0f64..1.0), 1..20)) {
        let reqs: Vec<(u32, u32, u32)> = picks
            .iter()
            .map(|&(s, f)| {
                let seq = s % seqs.len();
                let len = seqs[seq].len();
                let prompt = 1 + ((len - 1) as f64 * f) as usize;
                (seq as u32, prompt as u32, (len - prompt) as u32)
            })
            .collect();
        let w = workload(&seqs, &reqs);
        let run = |policy| {
            let spec = CacheSpec { policy, block_size: Some(1), page_size: Some(1), capacity_tokens: None, hybrid: None, sglang_pool: None };
            replay(&w, spec, ReplayOptions::default(), &|| ())
        };
        let (p, r, t) = (run(Policy::Paged), run(Policy::Radix), run(Policy::Token));
        prop_assert_eq!(p.hit_tokens, r.hit_tokens);
        prop_assert_eq!(r.hit_tokens, t.hit_tokens);
        prop_assert_eq!(run(Policy::None).hit_tokens, 0);
    }
}
