//! The event loop of one serving instance. Time is f64 seconds. At each step boundary, sends
//! due by then reach the engine (after waiting for a `--max-concurrency` slot, FIFO, which also
//! starts their clock late, as the clients' semaphore does); the scheduler forms a batch; the
//! cost model prices it; at its end every request that computed its last known token samples
//! one; finished requests free their KV, their slot, and release their session's next turn.
//! When the engine is idle, time jumps to the next event. A sent request reaches the engine
//! `request_overhead_s` after its send (HTTP, parsing, tokenisation: docs/engines/clients.md),
//! so every latency the client measures includes that delay. A request the engine's frontend
//! rejects ([`crate::engine::frontend`]: longer than the model length, no output) fails on
//! arrival and frees its slot at once; one it shortens generates fewer tokens. A request that
//! cannot run even in an empty engine (larger than the KV cache) fails. The load it put on the
//! engine ([`LoadStats`]) feeds the saturation diagnosis.

mod autoscale;
pub mod client;
mod disagg;
mod driver;
mod faults;
pub mod instance;
mod pool;
mod shared_store;

use crate::cache::{CacheSpec, CacheStats, ReqId};
use crate::cluster::router::RouterKind;
use crate::cost::CostModel;
use crate::engine::frontend::{FailReason, RequestLimits};
use crate::engine::EngineConfig;
use crate::metrics::{RequestRecord, TokenLog};
use crate::workload::Workload;
pub use autoscale::{Change, ScaleChange, ScaleLog, ScaleSync};
pub use disagg::Pd;
pub use driver::{drive, Fleet};
pub use faults::{FaultRecord, StopKind};
pub use instance::{Begun, Instance, InstanceSpec, InstanceStats, Role, Sink};
use serde::Serialize;
use std::collections::BTreeMap;

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
    /// The window pool's, under a model with sliding-window layers (SGLang).
    pub window_after_schedule: Option<crate::cache::Usage>,
    /// The recurrent-state pool's, in slots, under a model with linear-attention layers (SGLang).
    pub states_after_schedule: Option<crate::cache::Usage>,
    /// Tokens the cache's host tier holds right after scheduling (`None`: no host tier).
    pub host_tokens_after_schedule: Option<u64>,
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
    /// Runs every engine step as an event of its own: no stretch of decode steps is coalesced
    /// ([`Instance::coalesce`]). Everything a run yields is the same either way; this is for
    /// checking that, and for timing both.
    pub every_step: bool,
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
    /// Of those, the steps run inside a coalesced stretch ([`Instance::coalesce`]): how much
    /// the stretches saved, for tests and benches; no report shows it (a run stepped one step
    /// at a time has none and prints the same bytes).
    pub coalesced_steps: u64,
    /// The KV offloading tiers' figures, all instances together (`None` without one).
    pub offload: Option<crate::engine::vllm_offload::OffloadStats>,
    /// SGLang's HiCache tiers' figures, all instances together (`None` without one).
    pub hicache: Option<crate::cache::hicache::HostTierStats>,
    /// The LoRA adapters' loads, all instances together (`None` without LoRA).
    pub lora: Option<crate::engine::vllm_lora::LoraStats>,
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
    /// The instance each request was routed to, by request id (`u32::MAX`: not sent); with
    /// prefill/decode disaggregation, its prefill instance.
    pub assigned: Vec<u32>,
    /// Disaggregated runs: each request's way through the pools, by request id.
    pub pd: Vec<crate::cluster::pd::PdTimes>,
    /// Instance failures, in time order, and what each did (empty without a failure plan).
    pub faults: Vec<FaultRecord>,
    /// How many times each request moved to another instance after a failure, by request id
    /// (empty without a failure plan).
    pub migrations: Vec<u32>,
    /// What the autoscaler did (empty without one).
    pub scaling: ScaleLog,
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
    run_in(w, sends, cfg, cost, keep, Fleet::default())
}

/// [`run`] in `fleet`: with failures, an autoscaler, or a store left by another run for the
/// storage tier to start on ([`Fleet::store`] — as a second instance started on the directory or
/// Mooncake Store a first one filled finds it).
pub fn run_in(
    w: &Workload,
    sends: &[(u32, f64)],
    cfg: &SimConfig,
    cost: &dyn CostModel,
    keep: Keep,
    fleet: Fleet<'_>,
) -> SimResult {
    let spec = InstanceSpec { role: Role::Unified, engine: cfg.engine, cache: cfg.cache, cost };
    let mut router = crate::cluster::router::build(RouterKind::RoundRobin, Default::default(), 1);
    drive(w, sends, &Front::of(cfg), &[spec], router.as_mut(), None, fleet, keep, &|_, _| ())
}

/// The serving side's front: the client's limits and the engine frontend's checks.
#[derive(Debug, Clone, Copy)]
pub struct Front {
    pub engine: EngineConfig,
    pub max_concurrency: Option<u32>,
    pub request_overhead_s: f64,
    pub limits: Option<RequestLimits>,
    /// How the client counts a multi-token chunk's inter-token latency.
    pub itl: crate::metrics::ItlCount,
}

impl Front {
    /// The front of a one-instance configuration.
    pub fn of(cfg: &SimConfig) -> Self {
        Front {
            engine: cfg.engine,
            max_concurrency: cfg.max_concurrency,
            request_overhead_s: cfg.request_overhead_s,
            limits: cfg.limits,
            itl: crate::metrics::ItlCount::Chunk,
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
    crate::config::check_adapters(cfg, w)?;
    let mut sends = crate::workload::arrivals::schedule(w, &cfg.arrivals)?;
    let repeated = crate::workload::arrivals::split_repeats(w, &mut sends);
    let w = repeated.as_ref().unwrap_or(w);
    let front = Front {
        engine: cfg.engine,
        max_concurrency: cfg.max_concurrency,
        request_overhead_s: cfg.request_overhead_ms / 1e3,
        limits: Some(cfg.request_limits()),
        itl: cfg.client_itl,
    };
    let cost = cfg.cost();
    let cl = &cfg.cluster;
    let unified = InstanceSpec { role: Role::Unified, engine: cfg.engine, cache: cfg.cache, cost: &cost };
    let total = sends.len() as u64;
    let progress = |done, now| progress(done, total, now);
    let mut sim = match cl.pd {
        None => {
            // An autoscaled fleet has room for its largest size; the instances beyond the
            // initial ones start off.
            let n = cfg.autoscale.as_ref().map_or(cl.instances, |a| a.max_instances);
            let specs = vec![unified; n as usize];
            let mut router = crate::cluster::router::build(cl.router, cl.router_params, specs.len());
            let fleet = Fleet { faults: cfg.faults.as_ref(), autoscale: cfg.autoscale.as_ref(), store: None };
            drive(w, &sends, &front, &specs, router.as_mut(), None, fleet, keep, &progress)
        }
        Some(pd) => {
            let pool = |role, seqs: Option<u32>, tokens: Option<u32>| InstanceSpec {
                role,
                engine: EngineConfig {
                    max_num_seqs: seqs.unwrap_or(cfg.engine.max_num_seqs),
                    max_num_batched_tokens: tokens.unwrap_or(cfg.engine.max_num_batched_tokens),
                    ..cfg.engine
                },
                ..unified
            };
            let p = pool(Role::Prefill, pd.prefill_max_num_seqs, pd.prefill_max_num_batched_tokens);
            let d = pool(Role::Decode, pd.decode_max_num_seqs, pd.decode_max_num_batched_tokens);
            // Autoscaled pools have room for their largest sizes; the instances beyond the
            // initial ones start off.
            let mut pd = pd;
            if let Some(x) = cfg.autoscale.as_ref().and_then(|a| a.pools()) {
                (pd.prefill, pd.decode) = (x.max_prefill, x.max_decode);
            }
            let mut specs = vec![p; pd.prefill as usize];
            specs.extend(std::iter::repeat_n(d, pd.decode as usize));
            let mut router = crate::cluster::router::build(cl.router, cl.router_params, pd.prefill as usize);
            let mut decode_router =
                crate::cluster::router::build(cl.decode_router, cl.router_params, pd.decode as usize);
            let pd = Pd { cfg: pd, kv_bytes_per_token: cfg.kv_bytes_per_token, decode_router: decode_router.as_mut() };
            let fleet = Fleet { faults: None, autoscale: cfg.autoscale.as_ref(), store: None };
            drive(w, &sends, &front, &specs, router.as_mut(), Some(pd), fleet, keep, &progress)
        }
    };
    let summary =
        crate::metrics::Summary::new(&sim.records, sim.failed, &mut sim.log).with_goodput(&sim.records, cfg.goodput);
    Ok(Outcome { sim, summary, sent: sends.len() })
}

#[cfg(test)]
mod autoscale_tests;
#[cfg(test)]
mod bigmodel_tests;
#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod coalesce_tests;
#[cfg(test)]
mod faults_tests;
#[cfg(test)]
mod hicache_tests;
#[cfg(test)]
mod lmcache_tests;
#[cfg(test)]
mod lora_tests;
#[cfg(test)]
mod multistep_tests;
#[cfg(test)]
mod offload_tests;
#[cfg(test)]
pub(crate) mod tests;
