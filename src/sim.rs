//! The event loop of one serving instance. Time is f64 seconds. At each step boundary, sends
//! due by then reach the engine (after waiting for a `--max-concurrency` slot, FIFO, which also
//! starts their clock late, as the clients' semaphore does); the scheduler forms a batch; the
//! cost model prices it; at its end every request that computed its last known token samples
//! one; finished requests free their KV, their slot, and release their session's next turn.
//! When the engine is idle, time jumps to the next event. A sent request reaches the engine
//! `request_overhead_s` after its send (HTTP, parsing, tokenisation: docs/addendum-clients.md),
//! so every latency the client measures includes that delay. A request the engine's frontend
//! rejects ([`crate::engine::frontend`]: longer than the model length, no output) fails on
//! arrival and frees its slot at once; one it shortens generates fewer tokens. A request that
//! cannot run even in an empty engine (larger than the KV cache) fails. The load it put on the
//! engine ([`LoadStats`]) feeds the saturation diagnosis.

use crate::cache::{CacheSpec, CacheStats, ReqId};
use crate::cost::CostModel;
use crate::engine::frontend::{self, FailReason, RequestLimits, Verdict};
use crate::engine::{scheduler, Batch, EngineConfig, ReqRt, Step};
use crate::metrics::{RequestRecord, TokenLog};
use crate::workload::{SeqId, Workload};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

/// What to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SimConfig {
    pub engine: EngineConfig,
    pub cache: CacheSpec,
    /// Client-side limit on requests in flight.
    pub max_concurrency: Option<u32>,
    /// Seconds from a request's send to its arrival at the engine's scheduler.
    pub request_overhead_s: f64,
    /// The engine frontend's request checks ([`crate::engine::frontend`]); `None` = none.
    pub limits: Option<RequestLimits>,
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
    /// Failed requests by reason (they add up to `failed`), with one engine message each.
    pub failures: BTreeMap<FailReason, (u64, String)>,
    /// Requests whose output the engine cut to fit (SGLang, LightLLM), and tokens cut.
    pub outputs_cut: (u64, u64),
    /// What the load did to the engine, for the saturation diagnosis.
    pub load: LoadStats,
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

/// How loaded the engine was (measured while simulating; see [`crate::saturation`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LoadStats {
    /// Requests waiting in the engine right after the last send arrived.
    pub backlog_at_last_send: u32,
    /// When the last send arrived (seconds).
    pub last_send_s: f64,
    /// Time the engine spent computing steps (seconds).
    pub busy_s: f64,
    /// Time of steps whose KV held by requests was at least 95% of the capacity.
    pub kv_full_s: f64,
}

/// A step counts as "KV full" at this share of the capacity held by requests.
pub const KV_FULL_SHARE: f64 = 0.95;

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
    // Without a frontend (tests of the schedulers alone) every request generates at least one
    // token; with one, its verdict decides: rejected requests fail when they arrive, cut ones
    // generate fewer tokens.
    let mut rt: Vec<ReqRt> = w.requests.iter().map(|r| ReqRt::new(r.seq, r.prompt_len, r.output_len.max(1))).collect();
    let mut rejected: Vec<Option<(FailReason, String)>> = vec![None; n];
    let mut outputs_cut = (0u64, 0u64);
    if let Some(lim) = cfg.limits {
        for &(id, _) in sends {
            let q = &w.requests[id as usize];
            match frontend::validate(cfg.engine.engine, lim, q.prompt_len, q.output_len) {
                Verdict::Serve { output_len } => {
                    if output_len < q.output_len {
                        outputs_cut.0 += 1;
                        outputs_cut.1 += (q.output_len - output_len) as u64;
                    }
                    rt[id as usize].output_len = output_len;
                }
                Verdict::Reject { reason, message } => rejected[id as usize] = Some((reason, message)),
            }
        }
    }
    // A run of some of the requests numbers only their sequences' blocks.
    let used: Option<Vec<SeqId>> = (sends.len() < n).then(|| {
        let mut s: Vec<SeqId> = sends.iter().map(|&(id, _)| w.requests[id as usize].seq).collect();
        s.sort_unstable();
        s.dedup();
        s
    });
    let mut cache = cfg.cache.build_for(w.store.clone(), used.as_deref());
    cache.follow(&cfg.engine);
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
    // Sent, on the way to the engine: (arrival bits, FIFO, id).
    let mut transit: BinaryHeap<Due> = BinaryHeap::new();
    let overhead = cfg.request_overhead_s;
    debug_assert!(overhead.is_finite() && overhead >= 0.0);
    let mut in_flight = 0u32;
    let mut client_queue: VecDeque<ReqId> = VecDeque::new();
    let mut arrived: VecDeque<ReqId> = VecDeque::new();
    let mut log = TokenLog::default();
    let mut records = Vec::with_capacity(sends.len());
    let mut timeline = Vec::new();
    let mut tokens = Vec::new();
    let mut schedule = Vec::new();
    let mut preemptions_before: Vec<u32> = Vec::new();
    let mut batch = Batch::default();
    let mut finished: Vec<ReqId> = Vec::new();
    let mut failures: BTreeMap<FailReason, (u64, String)> = BTreeMap::new();
    let mut load = LoadStats::default();
    let capacity = cfg.cache.capacity_tokens;
    let (mut failed, mut steps, mut now) = (0u64, 0u64, 0.0f64);

    loop {
        // Completions free their slot and release their session's next turn; then sends due
        // by now reach the frontend, which rejects some at once (they complete too).
        loop {
            for id in finished.drain(..) {
                in_flight -= 1;
                if let Some(c) = client_queue.pop_front() {
                    in_flight += 1;
                    send_s[c as usize] = now;
                    transit.push(Reverse(((now + overhead).to_bits(), fifo, c)));
                    fifo += 1;
                }
                if let Some(t) = next_turn[id as usize] {
                    let at = planned[t as usize].max(now);
                    due.push(Reverse((at.to_bits(), fifo, t)));
                    fifo += 1;
                }
            }
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
                transit.push(Reverse(((t + overhead).to_bits(), fifo, id)));
                fifo += 1;
            }
            while let Some(&Reverse((bits, _, id))) = transit.peek() {
                if f64::from_bits(bits) > now {
                    break;
                }
                transit.pop();
                arrived.push_back(id);
            }
            let any_arrived = !arrived.is_empty();
            for id in arrived.drain(..) {
                match &rejected[id as usize] {
                    None => sched.enqueue(id),
                    Some((reason, message)) => {
                        failed += 1;
                        failures.entry(*reason).or_insert_with(|| (0, message.clone())).0 += 1;
                        finished.push(id);
                    }
                }
            }
            if any_arrived {
                load.last_send_s = now;
                load.backlog_at_last_send = sched.queued().0 as u32;
            }
            if finished.is_empty() {
                break;
            }
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
                failures
                    .entry(FailReason::NeverFits)
                    .or_insert_with(|| (0, "the request does not fit the KV cache even alone".to_string()))
                    .0 += 1;
                finished.push(id);
                continue;
            }
            let next = due.peek().into_iter().chain(transit.peek()).map(|&Reverse((bits, _, _))| bits).min();
            match next {
                Some(bits) => {
                    now = now.max(f64::from_bits(bits));
                    continue;
                }
                None => break,
            }
        }
        let overlap = cfg.engine.overlap;
        let price = |b: &crate::cost::BatchShape| if b.seqs == 0 { 0.0 } else { cost.step_time(b, overlap) };
        let dt = price(&batch.shape) + price(&batch.second_pass);
        let end = now + dt;
        steps += 1;
        let held = {
            let u = cache.usage();
            u.used_tokens - u.evictable_tokens
        };
        load.busy_s += dt;
        if capacity.is_some_and(|c| c > 0 && held as f64 >= KV_FULL_SHARE * c as f64) {
            load.kv_full_s += dt;
        }
        if keep.steps {
            let (waiting, running) = sched.queued();
            timeline.push(StepRecord {
                start_s: now,
                duration_s: dt,
                batch_size: batch.shape.seqs + batch.second_pass.seqs,
                prefill_tokens: batch.shape.prefill_tokens + batch.second_pass.prefill_tokens,
                decode_tokens: batch.shape.decode_seqs + batch.second_pass.decode_seqs,
                kv_used_tokens: held,
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
            let i = id as usize;
            // SGLang's max_new_tokens 0: done when the prompt is computed, no token sampled.
            let prefill_only = r.output_len == 0;
            if !prefill_only {
                r.generated += 1;
                sampled += 1;
                let prev = (!r.last_token_s.is_nan()).then_some(r.last_token_s);
                if let Some(p) = prev {
                    log.gap(end - p);
                }
                if keep.tokens {
                    tokens.push(TokenRecord { id, index: r.generated - 1, time_s: end });
                }
            }
            if let Some(c) = composition.as_mut() {
                if !prefill_only {
                    c.sampled.push(id);
                }
                if r.generated == r.output_len {
                    c.finished.push(id);
                }
            }
            if r.first_token_s.is_nan() {
                r.first_token_s = end;
            }
            r.last_token_s = end;
            if r.generated == r.output_len {
                cache.finish(id);
                sched.finished(id);
                records.push(RequestRecord {
                    id,
                    send_s: send_s[i],
                    first_token_s: r.first_token_s,
                    last_token_s: end,
                    prompt_tokens: w.requests[i].prompt_len,
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
        if !finished.is_empty() {
            progress(records.len() as u64 + failed, now);
        }
    }
    debug_assert!(finished.is_empty() && client_queue.is_empty());
    SimResult {
        records,
        failed,
        failures,
        outputs_cut,
        load,
        log,
        cache: cache.stats(),
        steps,
        timeline,
        tokens,
        schedule,
    }
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
    let mut sends = crate::workload::arrivals::schedule(w, &cfg.arrivals)?;
    let repeated = crate::workload::arrivals::split_repeats(w, &mut sends);
    let w = repeated.as_ref().unwrap_or(w);
    let sim_cfg = SimConfig {
        engine: cfg.engine,
        cache: cfg.cache,
        max_concurrency: cfg.max_concurrency,
        request_overhead_s: cfg.request_overhead_ms / 1e3,
        limits: Some(cfg.request_limits()),
    };
    let total = sends.len() as u64;
    let mut sim = run_with_progress(w, &sends, &sim_cfg, &cfg.cost(), keep, &|done, now| progress(done, total, now));
    let summary = crate::metrics::Summary::new(&sim.records, sim.failed, &mut sim.log);
    Ok(Outcome { sim, summary, sent: sends.len() })
}

#[cfg(test)]
mod tests;
