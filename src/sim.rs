//! The event loop of one serving instance. Time is f64 seconds. At each step boundary, sends
//! due by then reach the engine (after waiting for a `--max-concurrency` slot, FIFO, which also
//! starts their clock late, as the clients' semaphore does); the scheduler forms a batch; the
//! cost model prices it; at its end every request that computed its last known token samples
//! one; finished requests free their KV, their slot, and release their session's next turn.
//! When the engine is idle, time jumps to the next send. A request that cannot run even in an
//! empty engine (larger than the KV cache) fails.

use crate::cache::{CacheSpec, CacheStats, ReqId};
use crate::cost::CostModel;
use crate::engine::{scheduler, Batch, EngineConfig, ReqRt, Step};
use crate::metrics::{RequestRecord, TokenLog};
use crate::workload::{SeqId, Workload};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// What to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SimConfig {
    pub engine: EngineConfig,
    pub cache: CacheSpec,
    /// Client-side limit on requests in flight.
    pub max_concurrency: Option<u32>,
}

/// One step, for `--timeline-csv`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepRecord {
    pub start_s: f64,
    pub duration_s: f64,
    pub batch_size: u32,
    pub prefill_tokens: u64,
    pub decode_tokens: u32,
    /// KV slots held by requests (cached but evictable entries count as free, as vLLM's usage).
    pub kv_used_tokens: u64,
    pub waiting: u32,
    pub running: u32,
}

/// One output token, for `--token-times-csv`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TokenRecord {
    pub id: u32,
    /// 0 for the first output token.
    pub index: u32,
    pub time_s: f64,
}

/// One step's composition, for differential tests against the engines' own schedulers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScheduledStep {
    /// (request, new tokens, tokens computed before the step — the prefix hit for a request
    /// admitted in this step), in batch order.
    pub items: Vec<(ReqId, u32, u32)>,
    /// Requests preempted (vLLM) or retracted (SGLang) while the step was formed, by id.
    pub preempted: Vec<ReqId>,
    /// Requests that sampled a token at the end of the step, in batch order.
    pub sampled: Vec<ReqId>,
    /// Requests that finished at the end of the step, in batch order.
    pub finished: Vec<ReqId>,
    /// Cache usage right after scheduling.
    pub usage_after_schedule: crate::cache::Usage,
    /// Waiting and running requests right after scheduling.
    pub waiting: u32,
    pub running: u32,
}

/// What to keep beyond the per-request records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Keep {
    /// One record per engine step.
    pub steps: bool,
    /// One record per output token.
    pub tokens: bool,
    /// Every step's composition ([`ScheduledStep`]; costs a pass over all requests per step).
    pub schedule: bool,
}

/// The outcome of a run.
#[derive(Debug)]
pub struct SimResult {
    /// Completed requests, by completion time.
    pub records: Vec<RequestRecord>,
    pub failed: u64,
    pub log: TokenLog,
    pub cache: CacheStats,
    pub steps: u64,
    /// Per-step records, when asked for.
    pub timeline: Vec<StepRecord>,
    /// Per-token records, when asked for.
    pub tokens: Vec<TokenRecord>,
    /// Per-step compositions, when asked for.
    pub schedule: Vec<ScheduledStep>,
}

/// Min-heap key: send time (non-negative, so its bits order like the value), then FIFO.
type Due = Reverse<(u64, u64, ReqId)>;

/// Runs `sends` — (request, send time) in send order — through one instance.
pub fn run(w: &Workload, sends: &[(u32, f64)], cfg: &SimConfig, cost: &dyn CostModel, keep: Keep) -> SimResult {
    run_with_progress(w, sends, cfg, cost, keep, &|_, _| ())
}

/// [`run`], calling `progress(requests done (completed or rejected), simulated time)` after each
/// step that finished one.
pub fn run_with_progress(
    w: &Workload,
    sends: &[(u32, f64)],
    cfg: &SimConfig,
    cost: &dyn CostModel,
    keep: Keep,
    progress: &dyn Fn(u64, f64),
) -> SimResult {
    let n = w.requests.len();
    let mut rt: Vec<ReqRt> = w.requests.iter().map(|r| ReqRt::new(r.seq, r.prompt_len, r.output_len)).collect();
    // A run of some of the requests numbers only their sequences' blocks.
    let used: Option<Vec<SeqId>> = (sends.len() < n).then(|| {
        let mut s: Vec<SeqId> = sends.iter().map(|&(id, _)| w.requests[id as usize].seq).collect();
        s.sort_unstable();
        s.dedup();
        s
    });
    let mut cache = cfg.cache.build_for(w.store.clone(), used.as_deref());
    let tracks_computed = cache.tracks_computed();
    let mut sched = scheduler(&cfg.engine, w.store.clone());
    let mut due: BinaryHeap<Due> = BinaryHeap::new();
    let mut fifo = 0u64;
    let mut planned = vec![f64::NAN; n];
    let mut selected = vec![false; n];
    for &(id, _) in sends {
        selected[id as usize] = true;
    }
    // A turn whose previous turn is also sent waits for it to finish.
    let mut next_turn: Vec<Option<u32>> = vec![None; n];
    for &(id, t) in sends {
        planned[id as usize] = t;
        match w.requests[id as usize].prev_turn.filter(|&p| selected[p as usize]) {
            Some(p) => next_turn[p as usize] = Some(id),
            None => {
                due.push(Reverse((t.max(0.0).to_bits(), fifo, id)));
                fifo += 1;
            }
        }
    }
    let mut send_s = vec![f64::NAN; n];
    let mut in_flight = 0u32;
    let mut client_queue: VecDeque<ReqId> = VecDeque::new();
    let mut log = TokenLog::default();
    let mut records = Vec::with_capacity(sends.len());
    let mut timeline = Vec::new();
    let mut tokens = Vec::new();
    let mut schedule = Vec::new();
    let mut preemptions_before: Vec<u32> = Vec::new();
    let mut batch = Batch::default();
    let mut finished: Vec<ReqId> = Vec::new();
    let (mut failed, mut steps, mut now) = (0u64, 0u64, 0.0f64);

    loop {
        while let Some(&Reverse((bits, _, id))) = due.peek() {
            let t = f64::from_bits(bits);
            if t > now {
                break;
            }
            due.pop();
            if cfg.max_concurrency.is_some_and(|c| in_flight >= c) {
                client_queue.push_back(id);
                continue;
            }
            in_flight += 1;
            send_s[id as usize] = t;
            sched.enqueue(id);
        }
        if keep.schedule {
            preemptions_before.clear();
            preemptions_before.extend(rt.iter().map(|r| r.preemptions));
        }
        sched.schedule(&mut Step { now, reqs: &mut rt, cache: cache.as_mut(), out: &mut batch });
        let mut composition = keep.schedule.then(|| {
            let (waiting, running) = sched.queued();
            ScheduledStep {
                items: batch.items.iter().map(|&(id, k)| (id, k, rt[id as usize].num_computed)).collect(),
                preempted: (0..n as ReqId)
                    .filter(|&i| rt[i as usize].preemptions > preemptions_before[i as usize])
                    .collect(),
                usage_after_schedule: cache.usage(),
                waiting: waiting as u32,
                running: running as u32,
                ..Default::default()
            }
        });
        if batch.items.is_empty() {
            if batch.preempted > 0 {
                continue; // everything was preempted: admit again at the same time
            }
            let (waiting, running) = sched.queued();
            if running == 0 && waiting > 0 {
                // The head cannot run even alone: the engine rejects it.
                let id = sched.reject_head().expect("a waiting request");
                failed += 1;
                finished.push(id);
            } else {
                match due.peek() {
                    Some(&Reverse((bits, _, _))) => {
                        now = now.max(f64::from_bits(bits));
                        continue;
                    }
                    None => break,
                }
            }
        } else {
            let overlap = cfg.engine.overlap;
            let price = |b: &crate::cost::BatchShape| if b.seqs == 0 { 0.0 } else { cost.step_time(b, overlap) };
            let dt = price(&batch.shape) + price(&batch.second_pass);
            let end = now + dt;
            steps += 1;
            if keep.steps {
                let (waiting, running) = sched.queued();
                timeline.push(StepRecord {
                    start_s: now,
                    duration_s: dt,
                    batch_size: batch.shape.seqs + batch.second_pass.seqs,
                    prefill_tokens: batch.shape.prefill_tokens + batch.second_pass.prefill_tokens,
                    decode_tokens: batch.shape.decode_seqs + batch.second_pass.decode_seqs,
                    kv_used_tokens: {
                        let u = cache.usage();
                        u.used_tokens - u.evictable_tokens
                    },
                    waiting: waiting as u32,
                    running: running as u32,
                });
            }
            let mut sampled = 0;
            for &(id, k) in &batch.items {
                let r = &mut rt[id as usize];
                r.num_computed += k;
                if tracks_computed {
                    cache.computed(id, r.num_computed as usize);
                }
                if r.num_computed < r.num_tokens {
                    continue; // an unfinished prefill chunk samples nothing
                }
                r.generated += 1;
                sampled += 1;
                if let Some(c) = composition.as_mut() {
                    c.sampled.push(id);
                    if r.generated == r.output_len {
                        c.finished.push(id);
                    }
                }
                let i = id as usize;
                let prev = (!r.last_token_s.is_nan()).then_some(r.last_token_s);
                if let Some(p) = prev {
                    log.gap(end - p);
                }
                if keep.tokens {
                    tokens.push(TokenRecord { id, index: r.generated - 1, time_s: end });
                }
                if prev.is_none() {
                    r.first_token_s = end;
                }
                r.last_token_s = end;
                if r.generated == r.output_len {
                    cache.finish(id);
                    sched.finished(id);
                    let q = &w.requests[i];
                    records.push(RequestRecord {
                        id,
                        send_s: send_s[i],
                        first_token_s: r.first_token_s,
                        last_token_s: end,
                        prompt_tokens: q.prompt_len,
                        output_tokens: r.output_len,
                        cached_prompt_tokens: r.cached_prompt_tokens,
                        preemptions: r.preemptions,
                        first_scheduled_s: r.first_scheduled_s,
                    });
                    finished.push(id);
                } else {
                    r.num_tokens += 1;
                }
            }
            log.count(end, sampled);
            schedule.extend(composition.take());
            now = end;
        }
        if !finished.is_empty() {
            progress(records.len() as u64 + failed, now);
        }
        for id in finished.drain(..) {
            in_flight -= 1;
            if let Some(c) = client_queue.pop_front() {
                in_flight += 1;
                send_s[c as usize] = now;
                sched.enqueue(c);
            }
            if let Some(t) = next_turn[id as usize] {
                let at = planned[t as usize].max(now);
                due.push(Reverse((at.to_bits(), fifo, t)));
                fifo += 1;
            }
        }
    }
    SimResult { records, failed, log, cache: cache.stats(), steps, timeline, tokens, schedule }
}

/// A whole run: sends scheduled, instance simulated, summary computed.
#[derive(Debug)]
pub struct Outcome {
    pub sim: SimResult,
    pub summary: crate::metrics::Summary,
    /// Requests sent.
    pub sent: usize,
}

/// Simulates `w` under `cfg` (arrivals, engine, cache, step time).
pub fn simulate(w: &Workload, cfg: &crate::config::RunConfig, keep: Keep) -> crate::error::Result<Outcome> {
    simulate_with_progress(w, cfg, keep, &|_, _, _| ())
}

/// [`simulate`], calling `progress(requests done, requests sent, simulated time)` as requests
/// finish.
pub fn simulate_with_progress(
    w: &Workload,
    cfg: &crate::config::RunConfig,
    keep: Keep,
    progress: &dyn Fn(u64, u64, f64),
) -> crate::error::Result<Outcome> {
    let sends = crate::workload::arrivals::schedule(w, &cfg.arrivals)?;
    let sim_cfg = SimConfig { engine: cfg.engine, cache: cfg.cache, max_concurrency: cfg.max_concurrency };
    let total = sends.len() as u64;
    let mut sim = run_with_progress(w, &sends, &sim_cfg, &cfg.cost(), keep, &|done, now| progress(done, total, now));
    let summary = crate::metrics::Summary::new(&sim.records, sim.failed, &mut sim.log);
    Ok(Outcome { sim, summary, sent: sends.len() })
}

#[cfg(test)]
mod tests;
