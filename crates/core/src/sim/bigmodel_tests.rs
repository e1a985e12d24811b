//! Big-model deployments in the event loop, by hand: speculative decoding (a decode step
//! yields the expected tokens per step, dealt out deterministically, in one chunk) and vLLM's
//! pipeline-parallel batches in flight (a request in flight sits out the next batch; stages
//! overlap), and vLLM V0's virtual engines under PP (a scheduler each over half of the blocks,
//! a batch each in flight).

use super::tests::{cfg, workload, COST};
use super::*;
use crate::cost::{BatchShape, StepTime};
use crate::engine::{EngineConfig, EngineVersion};

/// The affine test model, claiming `tokens` tokens per decode step.
struct Speculative(f64);

impl CostModel for Speculative {
    fn step_parts(&self, b: &BatchShape) -> StepTime {
        COST.step_parts(b)
    }
    fn tokens_per_step(&self) -> f64 {
        self.0
    }
}

#[test]
fn decode_steps_yield_several_tokens_in_one_chunk() {
    let w = workload(&[((0..10).collect(), 10)]);
    let keep = Keep { tokens: true, ..Keep::default() };
    let r = run(&w, &[(0, 0.0)], &cfg(8, 1000, None), &Speculative(2.5), keep);
    // Prefill of 10: 0.01 + 0.010 = 0.020 → the first token (a prefill verifies no drafts).
    // Each decode step costs 0.01 + 0.002 = 0.012 and accrues 1.5 extra tokens: credit 1.5 → 1
    // extra (2 tokens, 3 out), 2.0 → 2 (3 tokens, 6), 1.5 → 1 (2, 8), 2.0 → 1, capped by the
    // output's last token (2, 10). Five steps in all.
    assert_eq!(r.steps, 5);
    let x = r.records[0];
    assert!((x.ttft_s() - 0.020).abs() < 1e-12);
    assert!((x.latency_s() - 0.068).abs() < 1e-12);
    // TPOT over the 9 tokens after the first; ITL is one gap per chunk (4 of 0.012 s).
    assert!((x.tpot_s().unwrap() - 0.048 / 9.0).abs() < 1e-12);
    let gaps = r.log.clone().gaps().to_vec();
    assert_eq!(gaps.iter().map(|&(_, n)| n).sum::<u64>(), 4);
    assert!(gaps.iter().all(|&(g, _)| (g - 0.012).abs() < 1e-12));
    let times: Vec<f64> = r.tokens.iter().map(|t| (t.time_s * 1000.0).round()).collect();
    assert_eq!(times, [20.0, 32.0, 32.0, 44.0, 44.0, 44.0, 56.0, 56.0, 68.0, 68.0]);
    assert_eq!(r.tokens.iter().map(|t| t.index).collect::<Vec<_>>(), (0..10).collect::<Vec<_>>());
    // One token a step without speculation: 10 steps.
    assert_eq!(run(&w, &[(0, 0.0)], &cfg(8, 1000, None), &COST, Keep::default()).steps, 10);
}

/// The affine test model, one batch in flight.
struct Sequential;

impl CostModel for Sequential {
    fn step_parts(&self, b: &BatchShape) -> StepTime {
        COST.step_parts(b)
    }
}

/// The affine test model split over two equal pipeline stages, two batches in flight.
struct TwoStages;

impl CostModel for TwoStages {
    fn step_parts(&self, b: &BatchShape) -> StepTime {
        COST.step_parts(b)
    }
    fn in_flight_batches(&self) -> usize {
        2
    }
    fn pipeline_stages(&self, b: &BatchShape, overlap: bool) -> Vec<f64> {
        let t = self.step_time(b, overlap);
        vec![t / 2.0, t / 2.0]
    }
}

#[test]
fn pipeline_batches_overlap_and_requests_in_flight_sit_out() {
    // Two prompts of 10, 3 outputs each, 10 tokens a batch. A (prompt 0, 0.020 s) enters at 0;
    // B (prompt 1: prompt 0 is in flight with nothing new) joins at once: stage 1 0.010–0.020,
    // stage 2 0.020–0.030. A ends at 0.020 (first token of 0); C (decode 0, 0.012 s) runs
    // 0.020–0.026 and 0.030–0.036 (stage 2 busy with B until 0.030). B ends 0.030; D (decode 1)
    // 0.030–0.036, 0.036–0.042; E (decode 0) 0.036–0.042, 0.042–0.048; F (decode 1) ends 0.054.
    let w = workload(&[((0..10).collect(), 3), ((100..110).collect(), 3)]);
    let keep = Keep { tokens: true, schedule: true, ..Keep::default() };
    let r = run(&w, &[(0, 0.0), (1, 0.0)], &cfg(8, 10, None), &TwoStages, keep);
    let at =
        |id: u32| -> Vec<f64> { r.tokens.iter().filter(|t| t.id == id).map(|t| (t.time_s * 1000.0).round()).collect() };
    assert_eq!(at(0), [20.0, 36.0, 48.0]);
    assert_eq!(at(1), [30.0, 42.0, 54.0]);
    // Each batch holds one request: the one in flight is never scheduled twice.
    assert_eq!(r.steps, 6);
    assert!(r.schedule.iter().all(|s| s.items.len() == 1), "{:?}", r.schedule);
    // One batch in flight at a time (the same model, no pipelining) takes longer.
    let seq = run(&w, &[(0, 0.0), (1, 0.0)], &cfg(8, 10, None), &Sequential, Keep::default());
    let last = |r: &SimResult| r.records.iter().map(|x| x.last_token_s).fold(0.0, f64::max);
    assert!(last(&seq) > last(&r), "{} vs {}", last(&seq), last(&r));
}

/// `cfg` for vLLM V0 without chunked prefill, with `ves` virtual engines.
fn v0(seqs: u32, tokens: u32, blocks: Option<u64>, ves: u32) -> SimConfig {
    let mut c = cfg(seqs, tokens, blocks);
    c.engine = EngineConfig {
        enable_chunked_prefill: false,
        virtual_engines: ves,
        ..EngineConfig {
            max_num_seqs: seqs,
            max_num_batched_tokens: tokens,
            ..EngineConfig::new(EngineVersion::VllmV0)
        }
    };
    c
}

#[test]
fn v0_virtual_engines_split_requests_and_pipeline_their_batches() {
    // A, B, C: prompts of 10, 2 outputs each, all at 0. A joins virtual engine 0, B engine 1 (0
    // has one unfinished), C engine 0 (a tie: the lower index). Engine 0 prefills A and C (20
    // tokens, 0.030 s: stages 0–0.015, 0.015–0.030); engine 1 prefills B behind it (0.020 s:
    // 0.015–0.025, 0.030–0.040). A and C's first tokens at 0.030; engine 0 decodes them (0.014 s:
    // 0.030–0.037, then stage 2 after B, 0.040–0.047); B's first token at 0.040, its decode
    // (0.012 s) 0.040–0.046, 0.047–0.053.
    let w = workload(&[((0..10).collect(), 2), ((100..110).collect(), 2), ((200..210).collect(), 2)]);
    let keep = Keep { tokens: true, schedule: true, ..Keep::default() };
    let arrivals = [(0, 0.0), (1, 0.0), (2, 0.0)];
    let r = run(&w, &arrivals, &v0(8, 100, None, 2), &TwoStages, keep);
    let at = |r: &SimResult, id: u32| -> Vec<f64> {
        r.tokens.iter().filter(|t| t.id == id).map(|t| (t.time_s * 1000.0).round()).collect()
    };
    assert_eq!(at(&r, 0), [30.0, 47.0]);
    assert_eq!(at(&r, 2), [30.0, 47.0]);
    assert_eq!(at(&r, 1), [40.0, 53.0]);
    assert_eq!(r.steps, 4);
    let batches: Vec<Vec<u32>> = r.schedule.iter().map(|s| s.items.iter().map(|i| i.0).collect()).collect();
    assert_eq!(batches, [vec![0, 2], vec![1], vec![0, 2], vec![1]]);
    // Each engine holds half of the pool: with 8 usable blocks of 4 tokens, engine 0 has 4, room
    // for one request of 10 + 2 tokens at a time, so C waits for A to finish; one scheduler over
    // all 8 blocks (no virtual engines) prefills two at once, A and B.
    let half = run(&w, &arrivals, &v0(8, 100, Some(9), 2), &TwoStages, keep);
    assert!(at(&half, 2)[0] >= at(&half, 0)[1], "C {:?} after A {:?}", at(&half, 2), at(&half, 0));
    // Engine 0 prefills A alone (0.020 s: 0–0.010, 0.010–0.020), engine 1 B behind it
    // (0.010–0.020, 0.020–0.030).
    assert_eq!(at(&half, 0)[0], 20.0);
    assert_eq!(at(&half, 1)[0], 30.0);
    let one = run(&w, &arrivals, &v0(8, 100, Some(9), 1), &Sequential, keep);
    assert_eq!(at(&one, 0)[0], at(&one, 1)[0], "one scheduler prefills A and B together");
    assert!(at(&one, 2)[0] > at(&one, 0)[0]);
}
