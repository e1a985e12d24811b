//! Hand-computed scenarios of several instances on one clock: round-robin splitting a pair of
//! requests over two instances (each then runs alone), least-load following completions,
//! the frontend's rejection still passing through the router, and the one-instance driver giving
//! the same result as the cluster driver with one instance.

use super::tests::{cfg, workload, COST};
use super::*;
use crate::cluster::router::{build, RouterParams};

fn cluster(w: &Workload, sends: &[(u32, f64)], n: usize, kind: RouterKind, c: &SimConfig) -> SimResult {
    let spec = InstanceSpec { role: Role::Unified, engine: c.engine, cache: c.cache, cost: &COST };
    let mut router = build(kind, RouterParams::default(), n);
    drive(w, sends, &Front::of(c), &vec![spec; n], router.as_mut(), None, Fleet::default(), Keep::default(), &|_, _| ())
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn round_robin_over_two_instances_runs_each_request_alone() {
    let w = workload(&[((0..10).collect(), 3), ((100..120).collect(), 3)]);
    let sends = [(0, 0.0), (1, 0.0)];
    let one = cluster(&w, &sends, 1, RouterKind::RoundRobin, &cfg(8, 1000, None));
    let two = cluster(&w, &sends, 2, RouterKind::RoundRobin, &cfg(8, 1000, None));
    // One instance: one prefill of 30 (0.040), two decodes of two (0.014 each).
    for x in &one.records {
        assert!(close(x.ttft_s(), 0.040) && close(x.latency_s(), 0.068), "{x:?}");
    }
    // Two: A prefills 10 (0.020) then decodes alone (0.012 each); B prefills 20 (0.030).
    let a = two.records.iter().find(|r| r.id == 0).unwrap();
    let b = two.records.iter().find(|r| r.id == 1).unwrap();
    assert!(close(a.ttft_s(), 0.020) && close(a.latency_s(), 0.044), "{a:?}");
    assert!(close(b.ttft_s(), 0.030) && close(b.latency_s(), 0.054), "{b:?}");
    assert_eq!(two.assigned[..2], [0, 1]);
    assert_eq!(two.steps, 6);
    assert_eq!(two.instances.iter().map(|s| s.requests).collect::<Vec<_>>(), [1, 1]);
    assert_eq!(two.instances.iter().map(|s| s.steps).collect::<Vec<_>>(), [3, 3]);
    assert!(close(two.instances[0].busy_s, 0.044) && close(two.instances[1].busy_s, 0.054));
    assert!(close(two.load.busy_s, 0.098));
    // The completions come out in time order across instances.
    assert_eq!(two.records.iter().map(|r| r.id).collect::<Vec<_>>(), [0, 1]);
}

#[test]
fn least_load_counts_completions() {
    // A (long output) goes to 0, B to 1; B finishes first, so C (sent after that) goes to 1,
    // and D, sent while C runs, to the instance with fewer in flight: 0 and 1 both hold one,
    // so the lowest index.
    let w = workload(&[
        ((0..10).collect(), 20),
        ((100..110).collect(), 1),
        ((200..210).collect(), 1),
        ((300..310).collect(), 1),
    ]);
    let r = cluster(&w, &[(0, 0.0), (1, 0.0), (2, 0.05), (3, 0.05)], 2, RouterKind::LeastLoad, &cfg(8, 1000, None));
    assert_eq!(r.assigned, [0, 1, 1, 0]);
}

#[test]
fn the_one_instance_driver_is_the_cluster_driver_with_one_instance() {
    let w = workload(&[((0..10).collect(), 3), ((0..20).collect(), 5), ((100..140).collect(), 2)]);
    let sends = [(0, 0.0), (1, 0.001), (2, 0.002)];
    let c = cfg(2, 16, Some(12));
    let a = run(&w, &sends, &c, &COST, Keep::default());
    let b = cluster(&w, &sends, 1, RouterKind::LeastLoad, &c);
    assert_eq!(a.records, b.records);
    assert_eq!(a.steps, b.steps);
}

#[test]
fn rejected_requests_pass_through_the_router_and_free_its_count() {
    let w = workload(&[((0..10).collect(), 3), ((0..500).collect(), 3), ((100..110).collect(), 3)]);
    let limits = crate::engine::frontend::RequestLimits { max_model_len: 100, pool_tokens: 1000 };
    let c = SimConfig { limits: Some(limits), ..cfg(8, 1000, None) };
    let r = cluster(&w, &[(0, 0.0), (1, 0.0), (2, 0.0)], 2, RouterKind::RoundRobin, &c);
    assert_eq!(r.failed, 1);
    assert_eq!(r.records.len(), 2);
    assert_eq!(r.assigned, [0, 1, 0]);
    assert_eq!(r.instances.iter().map(|s| s.requests).collect::<Vec<_>>(), [2, 1]);
}

/// One prefill and one decode instance on the affine model, `kvb` bytes per token over one
/// 8 Gb/s lane (10^9 bytes/s) with 1 ms set-up; the decode instance has `decode_blocks` blocks.
fn pd_run(w: &Workload, sends: &[(u32, f64)], style: crate::cluster::pd::PdStyle, decode_blocks: u64) -> SimResult {
    let c = cfg(8, 1000, None);
    let p = InstanceSpec { role: Role::Prefill, engine: c.engine, cache: c.cache, cost: &COST };
    let d = InstanceSpec { role: Role::Decode, cache: cfg(8, 1000, Some(decode_blocks)).cache, ..p };
    let pd = super::tests::pd_config(1, 1, style);
    let mut router = build(RouterKind::RoundRobin, RouterParams::default(), 1);
    let mut decode_router = build(RouterKind::LeastLoad, RouterParams::default(), 1);
    let pd = Pd { cfg: pd, kv_bytes_per_token: 1000, decode_router: decode_router.as_mut() };
    drive(w, sends, &Front::of(&c), &[p, d], router.as_mut(), Some(pd), Fleet::default(), Keep::default(), &|_, _| ())
}

#[test]
fn disaggregated_ttft_decomposes_exactly() {
    use crate::cluster::pd::PdStyle;
    let w = workload(&[((0..10).collect(), 3)]);
    for style in [PdStyle::Vllm, PdStyle::Sglang] {
        let r = pd_run(&w, &[(0, 0.0)], style, 1000);
        let x = r.records[0];
        let t = r.pd[0];
        // Prefill of 10 on P: 0.020. KV of 10 tokens, 10,000 bytes: 1 ms + 10 µs. D reuses the
        // two full blocks it received and computes the last 2 tokens: 0.012; then two decodes.
        assert!(close(t.prefill_done_s, 0.020), "{style:?} {t:?}");
        assert_eq!(t.bytes, 10_000);
        assert!(close(t.transfer_start_s, 0.020) && close(t.transfer_end_s, 0.02101), "{t:?}");
        assert!(close(x.ttft_s(), 0.03301), "{style:?} {x:?}");
        assert!(close(x.latency_s(), 0.05701), "{x:?}");
        assert_eq!(x.output_tokens, 3);
        assert_eq!(r.instances.iter().map(|s| (s.requests, s.steps)).collect::<Vec<_>>(), [(1, 1), (1, 3)]);
    }
}

#[test]
fn decode_allocation_blocks_the_hand_off_until_memory_frees() {
    // D holds 4 blocks of 4 tokens: A's prompt takes 3, so B (3 more) waits until A finishes.
    let w = workload(&[((0..10).collect(), 3), ((100..110).collect(), 3)]);
    let r = pd_run(&w, &[(0, 0.0), (1, 0.0)], crate::cluster::pd::PdStyle::Vllm, 5);
    let (a, b) = (r.pd[0], r.pd[1]);
    // P prefills both (20 tokens): 0.030. A moves at once; A's first step on D 0.03101–0.04301,
    // two decodes to 0.06701, when its blocks free and B's allocation and transfer start.
    assert!(close(a.transfer_start_s, 0.030) && close(a.transfer_end_s, 0.03101), "{a:?}");
    assert!(close(b.prefill_done_s, 0.030) && close(b.transfer_start_s, 0.06701), "{b:?}");
    let rb = r.records.iter().find(|x| x.id == 1).unwrap();
    assert!(close(rb.ttft_s(), 0.08002) && close(rb.latency_s(), 0.10402), "{rb:?}");
}

/// kv-aware reading KV events: request A's 33-token prompt is computed on one instance in the
/// step from 0 to 0.043 s (0.01 + 33 prefill tokens × 1 ms); B, the same prompt, arrives at 0.05.
/// The events reach the router at 0.043 + the delay: after 5 ms the router knows A's 8 blocks of
/// 4 and predicts B's hit of 32 tokens where A ran; after 50 ms it knows nothing yet and
/// predicts none.
#[test]
fn kv_events_reach_the_router_after_their_delay() {
    let p: Vec<u32> = (0..33).collect();
    let w = workload(&[(p.clone(), 1), (p, 1)]);
    let sends = [(0, 0.0), (1, 0.05)];
    let c = cfg(16, 1000, Some(100));
    let run = |delay_ms: f64| {
        let spec = InstanceSpec { role: Role::Unified, engine: c.engine, cache: c.cache, cost: &COST };
        let params = RouterParams { kv_event_delay_ms: Some(delay_ms), kv_block_size: 4, ..RouterParams::default() };
        let mut router = build(RouterKind::KvAware, params, 2);
        let f = Front::of(&c);
        drive(&w, &sends, &f, &[spec; 2], router.as_mut(), None, Fleet::default(), Keep::default(), &|_, _| ())
    };
    let seen = run(5.0);
    assert_eq!((seen.router.predicted_hit_tokens, seen.router.by_prefix), (32, 1), "{:?}", seen.router);
    assert_eq!(seen.records.iter().find(|x| x.id == 1).unwrap().cached_prompt_tokens, 32, "B follows A");
    let late = run(50.0);
    assert_eq!((late.router.predicted_hit_tokens, late.router.by_prefix), (0, 0), "{:?}", late.router);
}
