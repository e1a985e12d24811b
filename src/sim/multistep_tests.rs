//! vLLM V0 multi-step scheduling (`--num-scheduler-steps`), hand-computed with an affine step
//! model whose decode steps grow with context: step times, the host part once per batch, chunked
//! delivery (TTFT, token times, one inter-token gap per chunk), lookahead KV slots, a request
//! finishing mid-batch, an arrival waiting for the running batch.

use super::tests::{cfg, workload};
use super::*;
use crate::cost::Affine;
use crate::engine::{EngineConfig, EngineVersion};

/// Host 0.01 s a batch; device 0.001 s a prefill token, 0.002 s a decode, 0.00001 s a context token.
const COST: Affine =
    Affine { base_s: 0.01, per_prefill_token_s: 0.001, per_decode_seq_s: 0.002, per_ctx_token_s: 0.00001 };

fn v0(steps: u32) -> SimConfig {
    let base = cfg(8, 1000, Some(1000));
    SimConfig {
        engine: EngineConfig {
            max_num_seqs: 8,
            max_num_batched_tokens: 1000,
            enable_chunked_prefill: false,
            num_scheduler_steps: steps,
            ..EngineConfig::new(EngineVersion::VllmV0)
        },
        ..base
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn rec(r: &SimResult, id: u32) -> crate::metrics::RequestRecord {
    *r.records.iter().find(|x| x.id == id).expect("request completed")
}

fn gaps(r: &SimResult) -> Vec<(f64, u32)> {
    r.log.itl_s.clone()
}

#[test]
fn two_requests_three_steps_exact() {
    // A: 10 prompt tokens, 5 outputs; B: 20 prompt tokens, 3 outputs; both at 0.
    let w = workload(&[((0..10).collect(), 5), ((100..120).collect(), 3)]);
    let keep = Keep { tokens: true, schedule: true, ..Keep::default() };
    let r = run(&w, &[(0, 0.0), (1, 0.0)], &v0(3), &COST, keep);
    // Batch 1 (one step, prefills): 0.01 + 30 × 0.001 = 0.040 → both first tokens.
    // Batch 2 (3 steps, A ctx 10 + B ctx 20): host 0.01 once, then 0.004 + 0.00001 × (30, 32,
    // 34): steps end at 0.0543, 0.05862, 0.06296. B has 2 tokens left: done at step 2, one
    // chunk of 2 at 0.05862; A's chunk of 3 at 0.06296.
    // Batch 3 (A alone, ctx 13): 0.01 + 0.00213 → A's last token at 0.07509; the batch runs its
    // other 2 steps (0.00214 + 0.00215) to 0.07938.
    let (a, b) = (rec(&r, 0), rec(&r, 1));
    assert!(close(a.ttft_s(), 0.040) && close(b.ttft_s(), 0.040), "{a:?} {b:?}");
    assert!(close(b.latency_s(), 0.05862), "{b:?}");
    assert!(close(a.latency_s(), 0.07509), "{a:?}");
    assert!(close(a.tpot_s().unwrap(), (0.07509 - 0.040) / 4.0));
    assert_eq!(r.steps, 7, "1 + 3 + 3 forward steps");
    assert!(close(r.load.busy_s, 0.040 + 0.02296 + 0.01642), "{}", r.load.busy_s);
    // One gap per chunk, as the clients count them: B 0.01862; A 0.02296 and 0.01213.
    let g = gaps(&r);
    let expect = [0.05862 - 0.040, 0.06296 - 0.040, 0.07509 - 0.06296];
    assert_eq!(g.len(), 3, "{g:?}");
    for ((v, n), e) in g.iter().zip(expect) {
        assert!(close(*v, e) && *n == 1, "{g:?}");
    }
    // Token times: every token of a chunk arrives with it.
    let times = |id: u32| r.tokens.iter().filter(|t| t.id == id).map(|t| t.time_s).collect::<Vec<_>>();
    let (ta, tb) = (times(0), times(1));
    assert_eq!(ta.len(), 5);
    assert!(ta[1..4].iter().all(|&t| close(t, 0.06296)) && close(ta[4], 0.07509), "{ta:?}");
    assert!(close(tb[0], 0.040) && close(tb[1], 0.05862) && close(tb[2], 0.05862), "{tb:?}");
    assert_eq!(r.log.emitted.iter().map(|&(_, n)| n).collect::<Vec<_>>(), vec![2, 2, 3, 1]);
    // Lookahead: a decode of a request with c computed tokens holds KV for c + 3 (blocks of 4):
    // A 13 → 16, B 23 → 24 slots, against 12 + 24 one step at a time.
    let s = &r.schedule[1];
    assert_eq!(s.items, vec![(0, 1, 10), (1, 1, 20)]);
    assert_eq!(s.usage_after_schedule.used_tokens, 40);
    assert_eq!(s.finished, vec![1], "B finishes in the second batch");
    let one = run(&w, &[(0, 0.0), (1, 0.0)], &v0(1), &COST, keep);
    assert_eq!(one.schedule[1].usage_after_schedule.used_tokens, 36);
}

#[test]
fn an_arrival_waits_for_the_running_batch() {
    // A (10 tokens, 5 outputs) at 0; C (8 tokens, 2 outputs) arrives at 0.025, inside A's first
    // 3-step batch (0.020 to 0.020 + 0.01 + 0.00210 + 0.00211 + 0.00212 = 0.03633).
    let w = workload(&[((0..10).collect(), 5), ((100..108).collect(), 2)]);
    let r = run(&w, &[(0, 0.0), (1, 0.025)], &v0(3), &COST, Keep::default());
    let (a, c) = (rec(&r, 0), rec(&r, 1));
    assert!(close(a.ttft_s(), 0.020), "{a:?}");
    // C's prefill starts at the batch end: 0.03633 + 0.01 + 0.008 = 0.05433.
    assert!(close(c.first_scheduled_s, 0.03633), "{c:?}");
    assert!(close(c.ttft_s(), 0.05433 - 0.025), "{c:?}");
    // Then A (ctx 13, 1 left) and C (ctx 8, 1 left) both finish at the first of 3 steps:
    // 0.05433 + 0.01 + 0.004 + 0.00021.
    assert!(close(a.latency_s(), 0.06854) && close(c.latency_s(), 0.06854 - 0.025), "{a:?} {c:?}");
    // A's chunks: 0.020 (first), 0.03633 (3 tokens), 0.06854 (1).
    assert!(close(a.tpot_s().unwrap(), (0.06854 - 0.020) / 4.0));
    assert_eq!(r.steps, 1 + 3 + 1 + 3);
}
