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

/// The inter-token gaps, distinct values in ascending order with their counts.
fn gaps(r: &SimResult) -> Vec<(f64, u64)> {
    r.log.clone().gaps().to_vec()
}

/// Output tokens per distinct arrival time, in time order (one entry per step that sampled).
fn emitted(r: &SimResult) -> Vec<u32> {
    let mut out: Vec<(f64, u32)> = Vec::new();
    for t in &r.tokens {
        match out.last_mut() {
            Some((last, n)) if last.to_bits() == t.time_s.to_bits() => *n += 1,
            _ => out.push((t.time_s, 1)),
        }
    }
    out.into_iter().map(|(_, n)| n).collect()
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
    let expect = [0.07509 - 0.06296, 0.05862 - 0.040, 0.06296 - 0.040];
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
    assert_eq!(emitted(&r), vec![2, 2, 3, 1]);
    assert_eq!(r.log.total(), 8);
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

/// [`v0`] with vLLM V0's async output processing on.
fn v0_async(steps: u32) -> SimConfig {
    let mut c = v0(steps);
    c.engine.async_output_proc = true;
    c
}

#[test]
fn async_output_one_step_delivers_after_the_next_host_part_and_rides_once() {
    // R: 10 prompt tokens, 3 outputs, one step a batch.
    let w = workload(&[((0..10).collect(), 3)]);
    let keep = Keep { tokens: true, ..Keep::default() };
    let sync = run(&w, &[(0, 0.0)], &v0(1), &COST, keep);
    let r = run(&w, &[(0, 0.0)], &v0_async(1), &COST, keep);
    // Without it: prefill 0.01 + 0.010 = 0.020, decodes (ctx 10, 11) 0.0121 and 0.01211.
    let s = rec(&sync, 0);
    assert!(close(s.ttft_s(), 0.020) && close(s.latency_s(), 0.04421), "{s:?}");
    assert_eq!(sync.steps, 3);
    // With it: each token reaches the client when the next batch's host part is done (0.01 after
    // the batch end): 0.030, 0.0421; the last token (sampled at 0.04421) is found finished only
    // during a fourth batch (a decode at ctx 12, 0.00212 of device), delivered at 0.05421.
    let a = rec(&r, 0);
    assert!(close(a.ttft_s(), 0.030), "{a:?}");
    assert!(close(a.latency_s(), 0.05421), "{a:?}");
    let times: Vec<f64> = r.tokens.iter().map(|t| t.time_s).collect();
    assert_eq!(times.len(), 3);
    assert!(close(times[1], 0.0421) && close(times[2], 0.05421), "{times:?}");
    assert_eq!(r.steps, 4, "one more batch for the finished request");
    assert!(close(r.load.busy_s, 0.05633), "{}", r.load.busy_s);
}

#[test]
fn async_output_three_steps_exact() {
    // A: 10 prompt tokens, 5 outputs; B: 20 prompt tokens, 4 outputs; both at 0.
    let w = workload(&[((0..10).collect(), 5), ((100..120).collect(), 4)]);
    let keep = Keep { tokens: true, schedule: true, ..Keep::default() };
    let r = run(&w, &[(0, 0.0), (1, 0.0)], &v0_async(3), &COST, keep);
    // Batch 1 (prefills) 0 → 0.040; its first tokens are processed in batch 2 once its host part
    // is done: 0.050. Batch 2 (A ctx 10, B ctx 20): steps end 0.0543, 0.05862, 0.06296; both
    // gain 3 tokens, B its last at the last step, so B is not known finished when batch 3 is
    // scheduled: it rides batch 3 (A ctx 13, B ctx 23), whose callback delivers both chunks at
    // 0.06296 + 0.01 = 0.07296 and finds B finished. A's last token comes at batch 3's first step
    // (0.004 + 0.00001 × 36 = 0.00436: 0.07732), processed within the batch (not its last step);
    // the batch runs to 0.07732 + 0.00438 + 0.00440 = 0.0861.
    let (a, b) = (rec(&r, 0), rec(&r, 1));
    assert!(close(a.ttft_s(), 0.050) && close(b.ttft_s(), 0.050), "{a:?} {b:?}");
    assert!(close(b.latency_s(), 0.07296), "{b:?}");
    assert!(close(a.latency_s(), 0.07732), "{a:?}");
    assert_eq!(r.steps, 7, "1 + 3 + 3 forward steps");
    assert!(close(r.load.busy_s, 0.0861), "{}", r.load.busy_s);
    // One gap per chunk: A's and B's chunks of 3 (0.02296 each), A's last (0.00436).
    let g = gaps(&r);
    let total: u64 = g.iter().map(|&(_, n)| n).sum();
    assert_eq!(total, 3, "{g:?}");
    assert!(close(g[0].0, 0.00436) && close(g[1].0, 0.02296) && g[1].1 == 2, "{g:?}");
    assert_eq!(emitted(&r), vec![2, 6, 1]);
    assert_eq!(r.log.total(), 9);
    // B's seat and KV in batch 3: computed 23 + 3 lookahead → 28 slots (blocks of 4), with A's 16.
    let s = &r.schedule[2];
    assert_eq!(s.items, vec![(0, 1, 13), (1, 1, 23)]);
    assert_eq!(s.usage_after_schedule.used_tokens, 44);
    assert_eq!(r.schedule[1].finished, vec![1], "B's last token was sampled in batch 2");
    // Without async output processing B ends at 0.06296 and A runs alone: 0.06296 + 0.01213.
    let sync = run(&w, &[(0, 0.0), (1, 0.0)], &v0(3), &COST, keep);
    assert!(close(rec(&sync, 1).latency_s(), 0.06296) && close(rec(&sync, 0).latency_s(), 0.07509));
    assert_eq!(sync.schedule[2].items, vec![(0, 1, 13)]);
}

#[test]
fn async_output_a_finished_victim_is_freed_not_preempted() {
    // B (7 prompt tokens, 4 outputs) then A (3 prompt tokens, 2 outputs), one step a batch, 3
    // usable KV blocks of 4. Batch 1 (prefills, 0 → 0.020): B 2 blocks, A 1. Batch 2 (decodes,
    // to 0.0341): A's last token comes. Batch 3 at 0.0341: B needs a third block, none is free;
    // the victim, A (the last running), has its pending output processed first (vLLM 0.9
    // `_schedule_running`), is found finished and freed: no preemption, A ends at 0.0341, and
    // B runs alone (its second token at 0.0341 + 0.01 = 0.0441).
    let w = workload(&[((0..7).collect(), 4), ((100..103).collect(), 2)]);
    let mut c = v0_async(1);
    c.cache.capacity_tokens = Some(12);
    let keep = Keep { tokens: true, schedule: true, ..Keep::default() };
    let r = run(&w, &[(0, 0.0), (1, 0.0)], &c, &COST, keep);
    let (b, a) = (rec(&r, 0), rec(&r, 1));
    assert!(close(a.ttft_s(), 0.030) && close(b.ttft_s(), 0.030), "{a:?} {b:?}");
    assert!(close(a.latency_s(), 0.0341), "{a:?}");
    assert_eq!((a.preemptions, b.preemptions, r.failed), (0, 0, 0));
    assert!(r.schedule[2].preempted.is_empty());
    assert_eq!(r.schedule[2].items, vec![(0, 1, 8)], "A does not ride: it was freed");
    let tb: Vec<f64> = r.tokens.iter().filter(|t| t.id == 0).map(|t| t.time_s).collect();
    assert!(close(tb[1], 0.0441), "{tb:?}");
}
