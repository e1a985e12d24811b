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

pub mod client;
pub mod instance;

use crate::cache::{CacheSpec, CacheStats, ReqId};
use crate::cluster::router::{Arrival, Basis, InstanceView, Router, RouterKind};
use crate::cost::CostModel;
use crate::engine::frontend::{self, FailReason, RequestLimits, Verdict};
use crate::engine::{EngineConfig, ReqRt};
use crate::metrics::{RequestRecord, TokenLog};
use crate::workload::{SeqId, Workload};
use client::Client;
pub use instance::{Begun, Instance, InstanceSpec, InstanceStats, Sink};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

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
    /// Per-instance figures, by instance index.
    pub instances: Vec<InstanceStats>,
    /// What the router did.
    pub router: RouterStats,
    /// The instance each request was routed to, by request id (`u32::MAX`: not sent).
    pub assigned: Vec<u32>,
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
    let spec = InstanceSpec { engine: cfg.engine, cache: cfg.cache, cost };
    let mut router = crate::cluster::router::build(RouterKind::RoundRobin, Default::default(), 1);
    drive(w, sends, &Front::of(cfg), &[spec], router.as_mut(), keep, progress)
}

/// The serving side's front: the client's limits and the engine frontend's checks.
#[derive(Debug, Clone, Copy)]
pub struct Front {
    pub engine: EngineConfig,
    pub max_concurrency: Option<u32>,
    pub request_overhead_s: f64,
    pub limits: Option<RequestLimits>,
}

impl Front {
    /// The front of a one-instance configuration.
    pub fn of(cfg: &SimConfig) -> Self {
        Front {
            engine: cfg.engine,
            max_concurrency: cfg.max_concurrency,
            request_overhead_s: cfg.request_overhead_s,
            limits: cfg.limits,
        }
    }
}

/// What the router saw and did, over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct RouterStats {
    /// Requests routed because of a prefix match, and by load (or turn, or chance).
    pub by_prefix: u64,
    pub by_load: u64,
    /// Prompt tokens the router expected its choices to find cached, and the tokens the
    /// instances really reused (completed requests, first admission).
    pub predicted_hit_tokens: u64,
    pub real_hit_tokens: u64,
}

/// The instances as routers may read them.
struct View<'v, 'a>(&'v [Instance<'a>]);

impl InstanceView for View<'_, '_> {
    fn num_instances(&self) -> usize {
        self.0.len()
    }
    fn cached_prefix(&self, i: usize, seq: SeqId, known: usize) -> usize {
        self.0[i].cache.peek(seq, known)
    }
    fn held_tokens(&self, i: usize) -> u64 {
        let u = self.0[i].cache.usage();
        u.used_tokens - u.evictable_tokens
    }
    fn queued(&self, i: usize) -> u32 {
        let (w, r) = self.0[i].sched.queued();
        (w + r) as u32
    }
}

/// Runs `sends` through the instances `specs`, each arrival routed by `router`, on one clock.
/// Events at one time happen in this order: steps ending then (by instance index) apply their
/// effects; completions free client slots and release next turns; due requests are sent; sent
/// requests that reached the server are routed and queued (or rejected by the frontend); then
/// every idle instance with something new forms its next step (by index).
pub fn drive(
    w: &Workload,
    sends: &[(u32, f64)],
    front: &Front,
    specs: &[InstanceSpec<'_>],
    router: &mut dyn Router,
    keep: Keep,
    progress: &dyn Fn(u64, f64),
) -> SimResult {
    assert!(!specs.is_empty(), "a deployment has at least one instance");
    let n = w.requests.len();
    // Without a frontend (tests of the schedulers alone) every request generates at least one
    // token; with one, its verdict decides: rejected requests fail when they arrive, cut ones
    // generate fewer tokens.
    let mut rt: Vec<ReqRt> = w.requests.iter().map(|r| ReqRt::new(r.seq, r.prompt_len, r.output_len.max(1))).collect();
    let mut rejected: Vec<Option<(FailReason, String)>> = vec![None; n];
    let mut outputs_cut = (0u64, 0u64);
    if let Some(lim) = front.limits {
        for &(id, _) in sends {
            let q = &w.requests[id as usize];
            match frontend::validate(front.engine.engine, lim, q.prompt_len, q.output_len) {
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
    let mut inst: Vec<Instance> =
        specs.iter().map(|&s| Instance::new(w, s, used.as_deref(), specs.len() == 1)).collect();
    let mut client = Client::new(w, sends, front.max_concurrency, front.request_overhead_s);
    let mut assigned: Vec<u32> = vec![u32::MAX; n];
    let mut routing = RouterStats::default();
    // Instances whose step ends at a time: min-heap of (end bits, index).
    let mut busy: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    // Idle instances with something new to schedule.
    let mut dirty: Vec<usize> = Vec::new();
    let mut is_dirty = vec![false; inst.len()];
    let mut arrived: Vec<ReqId> = Vec::new();
    let mut finished: Vec<ReqId> = Vec::new();
    let mut log = TokenLog::default();
    let mut records = Vec::with_capacity(sends.len());
    let mut tokens = Vec::new();
    let mut failures: BTreeMap<FailReason, (u64, String)> = BTreeMap::new();
    let mut load = LoadStats::default();
    let (mut failed, mut now) = (0u64, 0.0f64);
    let mark = |i: usize, dirty: &mut Vec<usize>, is_dirty: &mut Vec<bool>| {
        if !is_dirty[i] {
            is_dirty[i] = true;
            dirty.push(i);
        }
    };

    loop {
        // Completions free their slot and release their session's next turn; then sends due
        // by now reach the frontend, which rejects some at once (they complete too).
        loop {
            for id in finished.drain(..) {
                client.completed(id, now);
                if let Some(&i) = assigned.get(id as usize).filter(|&&i| i != u32::MAX) {
                    router.finished(id, i as usize, now);
                }
            }
            client.send_due(now);
            client.arrivals(now, &mut arrived);
            let any_arrived = !arrived.is_empty();
            for id in arrived.drain(..) {
                let q = &w.requests[id as usize];
                let a = Arrival { id, seq: q.seq, prompt_len: q.prompt_len as usize, store: &w.store, now };
                let d = router.route(&a, &View(&inst));
                debug_assert!(d.instance < inst.len());
                assigned[id as usize] = d.instance as u32;
                match d.basis {
                    Basis::Prefix => routing.by_prefix += 1,
                    Basis::Load => routing.by_load += 1,
                }
                routing.predicted_hit_tokens += d.predicted_hit_tokens;
                inst[d.instance].stats.requests += 1;
                match &rejected[id as usize] {
                    None => {
                        inst[d.instance].enqueue(id);
                        mark(d.instance, &mut dirty, &mut is_dirty);
                    }
                    Some((reason, message)) => {
                        failed += 1;
                        failures.entry(*reason).or_insert_with(|| (0, message.clone())).0 += 1;
                        finished.push(id);
                    }
                }
            }
            if any_arrived {
                load.last_send_s = now;
                load.backlog_at_last_send = inst.iter().map(|x| x.sched.queued().0 as u32).sum();
            }
            if finished.is_empty() {
                break;
            }
        }
        // Idle instances with news form their next step.
        dirty.sort_unstable();
        let mut again = false;
        for i in std::mem::take(&mut dirty) {
            if inst[i].busy_until.is_some() {
                is_dirty[i] = false; // it schedules when its step ends
                continue;
            }
            match inst[i].begin_step(now, &mut rt, keep) {
                Begun::Busy(end) => {
                    is_dirty[i] = false;
                    busy.push(Reverse((end.to_bits(), i)));
                }
                Begun::Retry => {
                    dirty.push(i);
                    again = true;
                }
                Begun::RejectedHead(id) => {
                    failed += 1;
                    failures
                        .entry(FailReason::NeverFits)
                        .or_insert_with(|| (0, "the request does not fit the KV cache even alone".to_string()))
                        .0 += 1;
                    finished.push(id);
                    dirty.push(i);
                    again = true;
                }
                Begun::Idle => is_dirty[i] = false,
            }
        }
        if again {
            continue;
        }
        let next_end = busy.peek().map(|&Reverse((bits, _))| f64::from_bits(bits));
        let next = match (next_end, client.next_event()) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(t) => t,
                None => break,
            },
        };
        now = now.max(next);
        let mut any_finished = false;
        while let Some(&Reverse((bits, i))) = busy.peek() {
            if f64::from_bits(bits) > now {
                break;
            }
            busy.pop();
            let before = finished.len();
            let mut sink = Sink {
                w,
                keep,
                send_s: &client.send_s,
                log: &mut log,
                tokens: &mut tokens,
                records: &mut records,
                finished: &mut finished,
            };
            inst[i].end_step(&mut rt, &mut sink);
            any_finished |= finished.len() > before;
            mark(i, &mut dirty, &mut is_dirty);
        }
        if any_finished {
            progress(records.len() as u64 + failed, now);
        }
    }
    debug_assert!(finished.is_empty() && client.is_done());
    for r in &records {
        routing.real_hit_tokens += r.cached_prompt_tokens as u64;
    }
    let mut instances = Vec::with_capacity(inst.len());
    let mut cache = crate::cache::CacheStats::default();
    let mut timeline = Vec::new();
    let mut schedule = Vec::new();
    let mut steps = 0;
    for (i, x) in inst.into_iter().enumerate() {
        let mut st = x.stats;
        st.busy_s = x.load.busy_s;
        load.busy_s += x.load.busy_s;
        load.kv_full_s += x.load.kv_full_s;
        steps += st.steps;
        if i == 0 {
            cache = x.cache.stats();
            timeline = x.timeline;
            schedule = x.schedule;
        } else {
            cache.merge(&x.cache.stats());
            timeline.extend(x.timeline);
            schedule.extend(x.schedule);
        }
        instances.push(st);
    }
    SimResult {
        records,
        failed,
        failures,
        outputs_cut,
        load,
        log,
        cache,
        steps,
        timeline,
        tokens,
        schedule,
        instances,
        router: routing,
        assigned,
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
    let front = Front {
        engine: cfg.engine,
        max_concurrency: cfg.max_concurrency,
        request_overhead_s: cfg.request_overhead_ms / 1e3,
        limits: Some(cfg.request_limits()),
    };
    let cost = cfg.cost();
    let cl = &cfg.cluster;
    let specs = vec![InstanceSpec { engine: cfg.engine, cache: cfg.cache, cost: &cost }; cl.instances as usize];
    let mut router = crate::cluster::router::build(cl.router, cl.router_params, specs.len());
    let total = sends.len() as u64;
    let mut sim = drive(w, &sends, &front, &specs, router.as_mut(), keep, &|done, now| progress(done, total, now));
    let summary = crate::metrics::Summary::new(&sim.records, sim.failed, &mut sim.log);
    Ok(Outcome { sim, summary, sent: sends.len() })
}

#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod tests;
