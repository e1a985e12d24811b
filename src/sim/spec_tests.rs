//! Speculative decoding in the event loop, by hand: a decode step yields the expected tokens
//! per step, dealt out deterministically, in one chunk (one inter-token gap) per step.

use super::tests::{cfg, workload, COST};
use super::*;
use crate::cost::{BatchShape, StepTime};

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
    assert_eq!(r.log.itl_s.iter().map(|&(_, n)| n).sum::<u32>(), 4);
    assert!(r.log.itl_s.iter().all(|&(g, _)| (g - 0.012).abs() < 1e-12));
    let times: Vec<f64> = r.tokens.iter().map(|t| (t.time_s * 1000.0).round()).collect();
    assert_eq!(times, [20.0, 32.0, 32.0, 44.0, 44.0, 44.0, 56.0, 56.0, 68.0, 68.0]);
    assert_eq!(r.tokens.iter().map(|t| t.index).collect::<Vec<_>>(), (0..10).collect::<Vec<_>>());
    // One token a step without speculation: 10 steps.
    assert_eq!(run(&w, &[(0, 0.0)], &cfg(8, 1000, None), &COST, Keep::default()).steps, 10);
}
