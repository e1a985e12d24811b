//! Serving engines: the per-request runtime state every scheduler works on ([`ReqRt`]), the
//! [`Scheduler`] seam, and the engine limits ([`EngineConfig`]). One scheduler per engine
//! family; each follows ENGINE_SPEC exactly (vLLM v1: §2.1). A scheduler decides which
//! requests compute how many tokens in the next step; it owns its queues and talks to the
//! prefix cache; the event loop ([`crate::sim`]) prices the step and emits tokens, handing it a
//! [`Step`]. vLLM's two versions share their queues and preemption ([`Vllm`],
//! [`VllmQueues::schedule_running`]) and differ in their batch-forming rule ([`VllmRule`]).

pub mod flags;
pub mod frontend;
pub mod launch;
pub mod lightllm;
pub mod linear;
pub mod sglang;
pub mod trtllm;
pub mod version;
pub mod vllm;
pub mod vllm_hybrid;
pub mod vllm_lora;
pub mod vllm_offload;
pub mod vllm_pool;
pub mod vllm_v0;

use crate::cache::{PrefixCache, ReqId};
use crate::cost::{BatchShape, LocalWindow};
use crate::workload::SeqId;
use serde::Serialize;
pub use version::{EngineVersion, Rules};

/// Engine families (`--engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum EngineKind {
    /// vLLM v1: one token budget per step, running requests first, chunked prefill.
    Vllm,
    /// vLLM V0 (legacy, before 2025): whole prompts first with a 1% block watermark; a step
    /// with prefills runs no decode (--enable-chunked-prefill: decodes and chunks first).
    VllmV0,
    /// SGLang: a step is a prefill batch or a decode batch (prefill first), decode-memory
    /// reservation with new_token_ratio, retraction of the requests with the fewest outputs.
    Sglang,
    /// LightLLM: peak-footprint admission on a token pool; a decode pass then a prefill pass.
    Lightllm,
    /// TensorRT-LLM (PyTorch backend): admission reserving each request's blocks to completion,
    /// whole prompts after the generation requests, no preemption.
    Trtllm,
}

impl EngineKind {
    /// The name `--engine` takes.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Vllm => "vllm",
            EngineKind::VllmV0 => "vllm-v0",
            EngineKind::Sglang => "sglang",
            EngineKind::Lightllm => "lightllm",
            EngineKind::Trtllm => "trtllm",
        }
    }
}

/// SGLang `--schedule-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum SchedulePolicy {
    /// Arrival order (SGLang's default since 2025).
    Fcfs,
    /// Longest prefix match first; falls back to the current order above 128 waiting requests.
    Lpm,
    /// Depth-first over the radix tree, heaviest subtree first, requests after their subtree.
    DfsWeight,
    /// Longest output first.
    Lof,
    /// Seeded shuffle.
    Random,
}

/// vLLM `--scheduling-policy` (`SchedulerConfig.policy`, `vllm/config/scheduler.py`, 0.33).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum SchedulingPolicy {
    /// Arrival order; a preempted request goes back to the head of the queue (vLLM's default).
    #[default]
    Fcfs,
    /// Each request's `priority` first (lower is served first), then its arrival; a request that
    /// cannot grow preempts the running request of the highest (priority, arrival), which may be
    /// itself (`Scheduler.schedule`, `PriorityRequestQueue`, `Request.__lt__`, vLLM 0.33).
    Priority,
}

/// Scheduler limits, named as the engines name them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EngineConfig {
    pub engine: EngineKind,
    /// The release whose rules the scheduler and cache follow (`--engine-version`).
    pub version: EngineVersion,
    /// That release's rules.
    pub rules: Rules,
    /// vLLM `--max-num-seqs`: requests in `running` at most.
    pub max_num_seqs: u32,
    /// vLLM `--max-num-batched-tokens`: new tokens per step at most.
    pub max_num_batched_tokens: u32,
    /// vLLM `--enable-chunked-prefill` (v1 default on).
    pub enable_chunked_prefill: bool,
    /// vLLM `--long-prefill-token-threshold` (0 = off): cap on one request's chunk.
    pub long_prefill_token_threshold: u32,
    /// vLLM v1 `--scheduling-policy` (the other engines run their own order).
    pub scheduling_policy: SchedulingPolicy,
    /// SGLang `--chunked-prefill-size` (tokens per prefill batch chunk; 0 = chunking off).
    pub chunked_prefill_size: u32,
    /// SGLang `--max-prefill-tokens`: new tokens per prefill batch.
    pub max_prefill_tokens: u32,
    /// SGLang `--schedule-policy`.
    pub schedule_policy: SchedulePolicy,
    /// SGLang `--schedule-conservativeness` (scales the initial new_token_ratio).
    pub schedule_conservativeness: f64,
    /// SGLang page size (prefill chunks are page-aligned).
    pub page_size: u32,
    /// Seed for the random policy.
    pub seed: u64,
    /// The host prepares the next step while the device runs this one (SGLang's overlap
    /// schedule, vLLM's async scheduling): a step takes max(device, host), not the sum.
    pub overlap: bool,
    /// vLLM V0 `--num-scheduler-steps` (multi-step scheduling; 1 = off): a decode batch is
    /// scheduled once and runs this many forward steps (docs/engines/multistep.md).
    pub num_scheduler_steps: u32,
    /// vLLM V0 async output processing (`ModelConfig.use_async_output_proc`; off with
    /// `--disable-async-output-proc`, `--enforce-eager`, pipeline parallelism or speculative
    /// decoding): a batch's outputs are processed during the next batch, so a request whose
    /// last token came rides one more batch (docs/engines/multistep.md).
    pub async_output_proc: bool,
    /// vLLM V0 under pipeline parallelism: one scheduler per stage, each over its share of the
    /// KV blocks, with a batch each in flight (`LLMEngine`'s virtual engines; 1 = one scheduler).
    #[serde(skip_serializing_if = "is_one")]
    pub virtual_engines: u32,
    /// vLLM v1's CPU KV offloading (`--kv-offloading-size`); `None`: off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offload: Option<vllm_offload::OffloadConfig>,
    /// SGLang's hierarchical cache (`--enable-hierarchical-cache`); `None`: off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hicache: Option<crate::cache::hicache::HostTierConfig>,
    /// HiCache's storage tier (`--hicache-storage-backend`); `None`: off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hicache_storage: Option<crate::cache::storage::StorageConfig>,
    /// SGLang's priority scheduling (`--enable-priority-scheduling`); `None`: off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sglang_priority: Option<sglang::priority::SglangPriority>,
    /// SGLang `--max-queued-requests`: the waiting queue's bound; `None`: unbounded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_queued_requests: Option<u32>,
    /// SGLang `--abort-on-priority-when-disabled`: without priority scheduling, a request sent
    /// with a priority is aborted.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub abort_on_priority_when_disabled: bool,
    /// SGLang `prefill_only_one_req`: a prefill batch admits one request (0.4.3.post2 under
    /// EAGLE/NEXTN speculative decoding, `Rules::sglang_spec_one_prefill`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub prefill_only_one_req: bool,
    /// Which decode batches run as CUDA graphs; the others launch eagerly
    /// ([`crate::cost::CostModel::eager_step_launch_s`]).
    #[serde(skip_serializing_if = "DecodeGraphs::is_padded")]
    pub decode_graphs: DecodeGraphs,
    /// vLLM's LoRA serving (`--enable-lora`); `None`: off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora: Option<vllm_lora::LoraConfig>,
}

/// Which decode batches an engine runs as CUDA graphs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DecodeGraphs {
    /// Every decode batch (padded up to a captured size): cachesim's assumption elsewhere.
    Padded,
    /// SGLang 0.4.3.post2 under EAGLE/NEXTN: padding off (`disable_cuda_graph_padding`), so only
    /// batches of exactly a captured size — 1 to 32, 64, 128
    /// (`cuda_graph_runner.py` `get_batch_sizes_to_capture`), at most `cuda_graph_max_bs` 160 —
    /// run as graphs (`CudaGraphRunner.can_run`); any other decode batch runs eagerly.
    Exact043,
}

impl DecodeGraphs {
    fn is_padded(&self) -> bool {
        *self == DecodeGraphs::Padded
    }

    /// Whether a decode batch of `seqs` sequences runs as a graph.
    pub fn captures(self, seqs: u32) -> bool {
        match self {
            DecodeGraphs::Padded => true,
            DecodeGraphs::Exact043 => (1..=32).contains(&seqs) || seqs == 64 || seqs == 128,
        }
    }
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

impl EngineConfig {
    /// A configuration of `version`'s engine with plain limits — 256 sequences, 8,192 tokens per
    /// step, chunked prefill on (off for TensorRT-LLM), no long-prefill cap, SGLang's 16,384 prefill tokens without
    /// chunking, FCFS, page 1, no overlap — for tests and embedders to adjust field by field
    /// (`EngineConfig { max_num_seqs: 8, ..EngineConfig::new(v) }`). A run's configuration comes
    /// from [`crate::config::resolve`], which sets every field from the engine's own defaults.
    pub fn new(version: EngineVersion) -> Self {
        Self {
            engine: version.engine(),
            version,
            rules: version.rules(),
            max_num_seqs: 256,
            max_num_batched_tokens: 8192,
            // TensorRT-LLM's context chunking is off by default (and not modelled).
            enable_chunked_prefill: version.engine() != EngineKind::Trtllm,
            long_prefill_token_threshold: 0,
            scheduling_policy: SchedulingPolicy::Fcfs,
            chunked_prefill_size: 0,
            max_prefill_tokens: 16384,
            schedule_policy: SchedulePolicy::Fcfs,
            schedule_conservativeness: 1.0,
            page_size: 1,
            seed: 0,
            overlap: false,
            num_scheduler_steps: 1,
            async_output_proc: false,
            virtual_engines: 1,
            offload: None,
            hicache: None,
            hicache_storage: None,
            sglang_priority: None,
            max_queued_requests: None,
            abort_on_priority_when_disabled: false,
            prefill_only_one_req: false,
            decode_graphs: DecodeGraphs::Padded,
            lora: None,
        }
    }

    /// The engine's settings as the run report's "Engine:" line prints them (each engine's
    /// own knob names), without the line end.
    pub fn settings_line(&self) -> String {
        let e = self;
        match e.engine {
            EngineKind::Vllm => format!(
                "Engine:         {} (v1) · max_num_seqs {} · max_num_batched_tokens {} · chunked prefill {} · long_prefill_token_threshold {} · async scheduling {}{}",
                e.version,
                e.max_num_seqs,
                e.max_num_batched_tokens,
                on_off(e.enable_chunked_prefill),
                e.long_prefill_token_threshold,
                on_off(e.overlap),
                match e.scheduling_policy {
                    SchedulingPolicy::Fcfs => String::new(),
                    SchedulingPolicy::Priority => " · scheduling policy priority".to_string(),
                } + &e.offload.map(|o| format!(" · {}", o.describe())).unwrap_or_default()
                    + &e.lora.map(|l| format!(" · {}", l.describe())).unwrap_or_default()
            ),
            EngineKind::Sglang => format!(
                "Engine:         {} · max_running_requests {} · chunked_prefill_size {} · max_prefill_tokens {} · schedule_policy {} · schedule_conservativeness {} · overlap schedule {}",
                e.version,
                e.max_num_seqs,
                e.chunked_prefill_size,
                e.max_prefill_tokens,
                serde_json::to_value(e.schedule_policy).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
                e.schedule_conservativeness,
                on_off(e.overlap)
            ) + &e.sglang_priority.map(|p| p.describe()).unwrap_or_default()
                + if e.prefill_only_one_req {
                    " · one request per prefill batch, no radix cache or chunked prefill, eager decode outside the captured graph sizes (EAGLE/NEXTN in 0.4.3.post2)"
                } else {
                    ""
                }
                + &e.hicache.map(|h| format!(" · {}", h.describe())).unwrap_or_default()
                + &e.hicache_storage.map(|st| format!(" · {}", st.describe())).unwrap_or_default(),
            EngineKind::VllmV0 => format!(
                "Engine:         {} (legacy V0) · max_num_seqs {} · max_num_batched_tokens {} · {} · 1% block watermark{} · async output processing {}{}",
                e.version,
                e.max_num_seqs,
                e.max_num_batched_tokens,
                if e.enable_chunked_prefill { "chunked prefill, decodes first" } else { "prefills first, no chunked prefill" },
                if e.num_scheduler_steps > 1 {
                    format!(" · num_scheduler_steps {} (multi-step)", e.num_scheduler_steps)
                } else {
                    String::new()
                },
                on_off(e.async_output_proc),
                if e.virtual_engines > 1 {
                    format!(
                        " · {} virtual engines (a scheduler, the limits above and 1/{} of the KV blocks each)",
                        e.virtual_engines, e.virtual_engines
                    )
                } else {
                    String::new()
                }
            ),
            EngineKind::Lightllm => format!(
                "Engine:         {} · running_max_req_size {} · batch_max_tokens {} · chunked_prefill_size {} · peak-footprint admission",
                e.version,
                e.max_num_seqs, e.max_num_batched_tokens, e.chunked_prefill_size
            ),
            EngineKind::Trtllm => format!(
                "Engine:         {} (PyTorch backend) · max_batch_size {} · max_num_tokens {} · context chunking {} · GUARANTEED_NO_EVICT · overlap scheduler {}",
                e.version,
                e.max_num_seqs,
                e.max_num_batched_tokens,
                on_off(e.enable_chunked_prefill),
                on_off(e.overlap)
            ),
        }
    }
}

/// A request as the engine sees it while it runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReqRt {
    pub seq: SeqId,
    pub prompt_len: u32,
    pub output_len: u32,
    /// Tokens known: prompt + outputs sampled so far.
    pub num_tokens: u32,
    /// Tokens whose KV is computed (or reused from the cache).
    pub num_computed: u32,
    /// Outputs sampled so far.
    pub generated: u32,
    pub preemptions: u32,
    /// Prompt tokens reused from the cache at the first admission.
    pub cached_prompt_tokens: u32,
    /// When it was first scheduled (seconds), `NaN` before.
    pub first_scheduled_s: f64,
    /// When its first and its latest output token were sampled (seconds), `NaN` before (kept
    /// here, beside the counters every step reads, rather than in arrays of their own).
    pub first_token_s: f64,
    pub last_token_s: f64,
    /// Admitted at least once (so `cached_prompt_tokens` is set).
    pub admitted: bool,
    /// Sent with `ignore_eos` ([`crate::workload::Request::ignore_eos`]; true unless set).
    pub ignore_eos: bool,
    /// The request's `priority` as sent ([`crate::workload::Request::priority`]; `None`: without
    /// one), read by vLLM's and SGLang's priority policies.
    pub priority: Option<i32>,
    /// The LoRA adapter it names ([`crate::workload::Request::lora`]; 0: the base model).
    pub lora: u16,
}

impl ReqRt {
    /// A request not yet seen by the engine, generating `output_len` tokens (0: SGLang's
    /// prefill-only request; the other engines' frontends reject it, [`frontend`]).
    pub fn new(seq: SeqId, prompt_len: u32, output_len: u32) -> Self {
        Self {
            seq,
            prompt_len,
            output_len,
            num_tokens: prompt_len,
            num_computed: 0,
            generated: 0,
            preemptions: 0,
            cached_prompt_tokens: 0,
            first_scheduled_s: f64::NAN,
            first_token_s: f64::NAN,
            last_token_s: f64::NAN,
            admitted: false,
            ignore_eos: true,
            priority: None,
            lora: 0,
        }
    }

    /// The request as the workload sends it: with (`true`) or without `ignore_eos`, its
    /// `priority` and its LoRA adapter.
    pub fn sent_as(self, r: &crate::workload::Request) -> Self {
        Self { ignore_eos: r.ignore_eos, priority: r.priority, lora: r.lora, ..self }
    }
}

impl ReqRt {
    /// The cache admitted the request at `now` with `hit` tokens reused: computation starts
    /// there; the first admission's hit and time are kept for the report.
    pub fn admitted_with(&mut self, hit: usize, now: f64) {
        self.num_computed = hit as u32;
        if !self.admitted {
            self.admitted = true;
            self.cached_prompt_tokens = hit as u32;
        }
        if self.first_scheduled_s.is_nan() {
            self.first_scheduled_s = now;
        }
    }

    /// The request was preempted (recompute): its KV is gone, its outputs are kept.
    pub fn preempted(&mut self) {
        self.num_computed = 0;
        self.preemptions += 1;
    }

    /// The request's instance failed and it continues on another (request migration): its KV
    /// is gone there, and the next instance computes its prompt and the outputs streamed so far
    /// before sampling the rest. Nothing else changes: its first token, its last token's time
    /// and its first admission's hit are the client's.
    pub fn migrated(&mut self) {
        self.num_computed = 0;
    }
}

/// What a scheduler put in a step.
#[derive(Debug, Default)]
pub struct Batch {
    /// (request, new tokens) in scheduling order.
    pub items: Vec<(ReqId, u32)>,
    pub shape: BatchShape,
    /// A second forward pass in the same step (LightLLM's prefill after its decode).
    pub second_pass: BatchShape,
    /// Requests preempted while forming this batch.
    pub preempted: u32,
    /// Forward steps the batch runs before the next scheduling (vLLM V0 multi-step: a decode
    /// batch runs `--num-scheduler-steps`, each item one token a step); 0 or 1 = one step.
    pub steps: u32,
    /// vLLM V0 async output processing: requests whose pending output the scheduler processed
    /// before preempting them while forming this batch (those found finished were freed, not
    /// preempted: they left `running` and the cache).
    pub processed: Vec<ReqId>,
    /// The batch's forward starts no earlier than this (vLLM's KV connector flushing the stores
    /// of a request preempted in it); 0 otherwise.
    pub wait_until: f64,
    /// Seconds the worker spends before the forward: making the batch's LoRA adapters resident
    /// (vLLM's synchronous adapter loads), waiting for SGLang write-back's copies to the host;
    /// 0 otherwise.
    pub load_s: f64,
    /// Seconds of host-tier loads the forward's layers wait on one by one (SGLang HiCache:
    /// each layer's attention waits for that layer's copy), so the forward lasts at least this.
    pub overlap_load_s: f64,
}

impl Batch {
    /// An empty batch of a model whose windowed layers attend to `local`
    /// ([`CostModel::local_window`](crate::cost::CostModel::local_window)).
    pub fn within(local: Option<LocalWindow>) -> Self {
        Self { shape: BatchShape::within(local), second_pass: BatchShape::within(local), ..Self::default() }
    }

    /// Empties the batch for reuse.
    pub fn clear(&mut self) {
        self.items.clear();
        self.shape.clear();
        self.second_pass.clear();
        self.preempted = 0;
        self.steps = 1;
        self.processed.clear();
        self.wait_until = 0.0;
        self.load_s = 0.0;
        self.overlap_load_s = 0.0;
    }
    /// Forward steps the batch runs (at least 1).
    pub fn steps(&self) -> u32 {
        self.steps.max(1)
    }
    /// Adds `new` tokens of request `r`.
    #[inline]
    pub fn push(&mut self, id: ReqId, r: &ReqRt, new: u32) {
        self.items.push((id, new));
        self.shape.add(r.num_computed as u64, new as u64);
    }

    /// Takes request `id`'s tokens back out of the batch (vLLM's priority preemption of a
    /// request scheduled earlier in the step); returns how many it had, `None` when it had none.
    /// The shape is summed again from the items left (their computed tokens have not moved).
    pub fn take_back(&mut self, id: ReqId, reqs: &[ReqRt]) -> Option<u32> {
        let k = self.items.iter().position(|&(x, _)| x == id)?;
        let (_, new) = self.items.remove(k);
        self.shape.clear();
        for &(x, n) in &self.items {
            self.shape.add(reqs[x as usize].num_computed as u64, n as u64);
        }
        Some(new)
    }
}

/// What one scheduling step works on: the time, every request's progress, the cache, and the
/// batch being formed.
pub struct Step<'a> {
    pub now: f64,
    pub reqs: &'a mut [ReqRt],
    pub cache: &'a mut dyn PrefixCache,
    pub out: &'a mut Batch,
}

/// A waiting request's place in vLLM's priority queue: `Request.__lt__` (vLLM 0.33
/// `vllm/v1/request.py`) orders by priority, then arrival time, then request id; cachesim's ids
/// follow the order requests were sent in, so one burst keeps its send order. Arrival times are
/// never negative, so their bits order as the numbers do.
type PriorityKey = (i32, u64, ReqId);

/// vLLM's queues (v1 and V0): `running` in admission order; `waiting` FCFS with preempted
/// requests prepended, or, under v1's priority policy, a heap by [`PriorityKey`]
/// (`PriorityRequestQueue`, `vllm/v1/core/sched/request_queue.py`, where `prepend_request` is an
/// ordinary insertion).
#[derive(Debug, Default)]
pub struct VllmQueues {
    pub running: Vec<ReqId>,
    /// The FCFS waiting queue (empty under the priority policy).
    pub waiting: std::collections::VecDeque<ReqId>,
    /// vLLM V0 async output processing: a preemption victim's pending output is processed
    /// first, and a victim found finished is freed instead of preempted.
    pub async_output_proc: bool,
    /// The priority policy's waiting heap, and every enqueued request's key by id; `None` under
    /// FCFS.
    priority: Option<Priority>,
    /// Waiting requests that hold KV blocks — loading from a KV tier, or loaded and not yet
    /// scheduled — drained before `waiting` (vLLM 0.33 `Scheduler.kv_holding_waiting`), in
    /// arrival order under FCFS and by (priority, arrival) under the priority policy; empty
    /// without a KV connector.
    pub holding: std::collections::VecDeque<ReqId>,
}

#[derive(Debug, Default)]
struct Priority {
    heap: std::collections::BinaryHeap<std::cmp::Reverse<PriorityKey>>,
    keys: Vec<(i32, u64)>,
}

impl Priority {
    fn key(&self, id: ReqId) -> PriorityKey {
        let (p, t) = self.keys[id as usize];
        (p, t, id)
    }
}

impl VllmQueues {
    /// Queues under `policy`.
    pub fn new(policy: SchedulingPolicy) -> Self {
        let priority = (policy == SchedulingPolicy::Priority).then(Priority::default);
        Self { priority, ..Self::default() }
    }

    /// An arrived request (priority `priority`, arriving at `now` seconds) joins the waiting
    /// queue: at its tail, or at its place by priority.
    pub fn arrive(&mut self, id: ReqId, priority: i32, now: f64) {
        match &mut self.priority {
            None => self.waiting.push_back(id),
            Some(p) => {
                let i = id as usize;
                if p.keys.len() <= i {
                    p.keys.resize(i + 1, (0, 0));
                }
                // Times before 0 (and −0.0, whose sign bit would order last) count as 0.
                p.keys[i] = (priority, if now > 0.0 { now.to_bits() } else { 0 });
                p.heap.push(std::cmp::Reverse(p.key(id)));
            }
        }
    }

    /// The waiting request scheduled next.
    pub fn waiting_head(&self) -> Option<ReqId> {
        match &self.priority {
            None => self.waiting.front().copied(),
            Some(p) => p.heap.peek().map(|std::cmp::Reverse((_, _, id))| *id),
        }
    }

    /// Takes the waiting head out of the queue.
    pub fn pop_waiting(&mut self) -> Option<ReqId> {
        match &mut self.priority {
            None => self.waiting.pop_front(),
            Some(p) => p.heap.pop().map(|std::cmp::Reverse((_, _, id))| id),
        }
    }

    /// Requests waiting (those holding KV blocks included).
    /// Every waiting request (those holding KV blocks, then the queue), in no set order.
    pub fn waiting_ids(&self) -> impl Iterator<Item = ReqId> + '_ {
        let heap = self.priority.iter().flat_map(|p| p.heap.iter().map(|std::cmp::Reverse((_, _, id))| *id));
        self.holding.iter().copied().chain(self.waiting.iter().copied()).chain(heap)
    }

    /// Requests waiting: the queue and those holding KV blocks.
    pub fn waiting_len(&self) -> usize {
        self.holding.len()
            + match &self.priority {
                None => self.waiting.len(),
                Some(p) => p.heap.len(),
            }
    }

    /// A preempted request goes back to waiting: at the head (FCFS), at its place (priority).
    fn requeue(&mut self, id: ReqId) {
        match &mut self.priority {
            None => self.waiting.push_front(id),
            Some(p) => p.heap.push(std::cmp::Reverse(p.key(id))),
        }
    }

    /// Requests passed by while holding KV blocks (`step_skipped_kv_holding`) go back to their
    /// own queue (`kv_holding_waiting`, made by `create_request_queue` for the scheduling
    /// policy): before the others, in their order (FCFS), or at their places (priority).
    pub fn prepend_holding(&mut self, ids: &[ReqId]) {
        match &self.priority {
            None => {
                for &id in ids.iter().rev() {
                    self.holding.push_front(id);
                }
            }
            Some(p) => {
                for &id in ids {
                    let k = p.key(id);
                    let at = self.holding.partition_point(|&h| p.key(h) < k);
                    self.holding.insert(at, id);
                }
            }
        }
    }

    /// Requests passed by while forming a step (`skipped_waiting_requests`) go back to waiting:
    /// before the others, in their order (FCFS), or at their places (priority).
    pub fn prepend(&mut self, ids: &[ReqId]) {
        for &id in ids.iter().rev() {
            self.requeue(id);
        }
    }

    /// Under the priority policy, the index in `running` of the request vLLM preempts: the
    /// greatest (priority, arrival) (`max(self.running, key=lambda r: (r.priority,
    /// r.arrival_time))`); `None` under FCFS, whose victim is the last.
    pub fn priority_victim(&self) -> Option<usize> {
        let p = self.priority.as_ref()?;
        let mut best: Option<(usize, PriorityKey)> = None;
        for (i, &id) in self.running.iter().enumerate() {
            let k = p.key(id);
            if best.is_none_or(|(_, b)| k > b) {
                best = Some((i, k));
            }
        }
        best.map(|(i, _)| i)
    }

    /// Preempts `running[index]` (recompute: its KV freed, its outputs kept) back to waiting.
    pub fn preempt_at(&mut self, index: usize, s: &mut Step) -> ReqId {
        let victim = self.running.remove(index);
        s.cache.preempt(victim);
        s.reqs[victim as usize].preempted();
        self.requeue(victim);
        s.out.preempted += 1;
        victim
    }

    /// Drops a finished request from `running`.
    pub fn finished(&mut self, id: ReqId) {
        if let Some(p) = self.running.iter().position(|&x| x == id) {
            self.running.remove(p);
        }
    }
    /// (waiting, running).
    pub fn queued(&self) -> (usize, usize) {
        (self.waiting_len(), self.running.len())
    }

    /// Schedules `n` more tokens of running request `id`, making room vLLM's way (v1 and V0):
    /// while its KV cannot grow, the last running request is preempted (recompute: prepended
    /// to waiting). Returns false, scheduling nothing, when `id` itself had to be preempted.
    #[inline]
    pub fn schedule_running(&mut self, id: ReqId, n: u32, s: &mut Step) -> bool {
        self.schedule_running_ahead(id, n, 0, s)
    }

    /// [`VllmQueues::schedule_running`] reserving KV for `lookahead` more tokens beyond the `n`
    /// (vLLM V0 `Scheduler._append_slots` / `_can_append_slots` with `num_lookahead_slots`:
    /// multi-step reserves `--num-scheduler-steps` − 1 slots for the steps after the first).
    #[inline]
    pub fn schedule_running_ahead(&mut self, id: ReqId, n: u32, lookahead: u32, s: &mut Step) -> bool {
        let known = (s.reqs[id as usize].num_computed + n) as usize;
        while !s.cache.grow_ahead(id, known, lookahead as usize) {
            let victim = self.running.pop().expect("the request itself is running");
            if self.async_output_proc {
                // vLLM V0 `Scheduler._schedule_running` (0.9): `output_proc_callback(request_id=
                // victim)` before preempting; a victim now finished is freed, not preempted
                // (`_free_finished_seq_group`). Its last token came in the previous batch.
                s.out.processed.push(victim);
                let v = &s.reqs[victim as usize];
                if v.output_len > 0 && v.generated >= v.output_len {
                    s.cache.finish(victim);
                    if victim == id {
                        return false;
                    }
                    continue;
                }
            }
            s.cache.preempt(victim);
            s.reqs[victim as usize].preempted();
            self.requeue(victim);
            s.out.preempted += 1;
            if victim == id {
                return false;
            }
        }
        s.out.push(id, &s.reqs[id as usize], n);
        true
    }
}

/// vLLM's batch-forming rule (v1 or V0), over the queues both versions share.
pub trait VllmRule: Send {
    /// Forms the next batch into `s.out` (already cleared).
    fn schedule(&mut self, q: &mut VllmQueues, s: &mut Step);
    /// [`Scheduler::admission`] under this rule; the default does not say.
    fn admission(&self, _q: &VllmQueues, _decodes: u32) -> Admission {
        Admission::Open
    }
    /// [`Scheduler::finished`]'s news for the rule (its KV connector).
    fn finished(&mut self, _id: ReqId) {}
    /// [`Scheduler::priced`] under this rule.
    fn priced(&mut self, _now: f64, _end: Option<f64>) {}
    /// [`Scheduler::next_copy_end`] under this rule.
    fn next_copy_end(&self) -> Option<f64> {
        None
    }
    /// [`Scheduler::coalesced`] under this rule.
    fn coalesced(&mut self, _steps: u32) {}
    /// [`Scheduler::offload_stats`] under this rule.
    fn offload_stats(&self) -> Option<vllm_offload::OffloadStats> {
        None
    }
    /// [`Scheduler::lmcache_server_swap`] under this rule.
    fn lmcache_server_swap(&mut self, _server: &mut vllm_offload::lmcache::remote::LmServer) -> bool {
        false
    }
    /// [`Scheduler::lora_stats`] under this rule.
    fn lora_stats(&self) -> Option<vllm_lora::LoraStats> {
        None
    }
    /// `--max-loras` under this rule (0: LoRA off).
    fn max_loras(&self) -> u32 {
        0
    }
    /// Waiting requests passed by and not scheduled since (vLLM's `deferred_waiting`).
    fn deferred(&self) -> usize {
        0
    }
}

/// A vLLM scheduler: the shared queues and one version's rule.
pub struct Vllm<R> {
    q: VllmQueues,
    rule: R,
}

impl<R: VllmRule> Vllm<R> {
    /// An idle scheduler with `policy`'s queues.
    pub fn new(rule: R, policy: SchedulingPolicy) -> Self {
        Self { q: VllmQueues::new(policy), rule }
    }
}

impl<R: VllmRule> Scheduler for Vllm<R> {
    fn enqueue(&mut self, id: ReqId, priority: Option<i32>, now: f64) {
        // vLLM's `priority` defaults to 0 (`EngineCoreRequest`, `vllm/v1/engine/__init__.py`).
        self.q.arrive(id, priority.unwrap_or(0), now);
    }

    fn schedule(&mut self, s: &mut Step) {
        s.out.clear();
        self.rule.schedule(&mut self.q, s);
    }

    fn finished(&mut self, id: ReqId) {
        self.q.finished(id);
        self.rule.finished(id);
    }

    fn queued(&self) -> (usize, usize) {
        self.q.queued()
    }

    fn reject_head(&mut self) -> Option<ReqId> {
        self.q.holding.pop_front().or_else(|| self.q.pop_waiting())
    }

    fn admission(&self, decodes: u32) -> Admission {
        self.rule.admission(&self.q, decodes)
    }

    fn priced(&mut self, now: f64, end: Option<f64>) {
        self.rule.priced(now, end);
    }

    fn next_copy_end(&self) -> Option<f64> {
        self.rule.next_copy_end()
    }

    fn coalesced(&mut self, steps: u32) {
        self.rule.coalesced(steps);
    }

    fn offload_stats(&self) -> Option<vllm_offload::OffloadStats> {
        self.rule.offload_stats()
    }

    fn lmcache_server_swap(&mut self, server: &mut vllm_offload::lmcache::remote::LmServer) -> bool {
        self.rule.lmcache_server_swap(server)
    }

    fn lora_stats(&self) -> Option<vllm_lora::LoraStats> {
        self.rule.lora_stats()
    }

    fn waiting_metric(&self) -> usize {
        self.q.waiting_len().saturating_sub(self.rule.deferred())
    }

    fn lora_adapters(&self, reqs: &[ReqRt], running: &mut Vec<u16>, waiting: &mut Vec<u16>) -> u32 {
        let max = self.rule.max_loras();
        if max > 0 {
            distinct_adapters(self.q.running.iter().copied(), reqs, running);
            distinct_adapters(self.q.waiting_ids(), reqs, waiting);
        }
        max
    }
}

/// The distinct adapters (not the base model) the requests `ids` name, into `out` (cleared).
fn distinct_adapters(ids: impl Iterator<Item = ReqId>, reqs: &[ReqRt], out: &mut Vec<u16>) {
    out.clear();
    for id in ids {
        let l = reqs[id as usize].lora;
        if l != 0 && !out.contains(&l) {
            out.push(l);
        }
    }
}

/// Whether the next steps could admit a waiting request, asked after a step of only decodes
/// ([`Scheduler::admission`]), for as long as nothing arrives, finishes or is preempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// No: nothing waits, the running requests are at the sequence limit, or the decodes take
    /// the whole token budget.
    Closed,
    /// Only if what the cache holds for this request, refused at the queue's head in the step
    /// just formed, changes (the cache watches it: [`crate::cache::PrefixCache::grow_quietly`]).
    Refused(ReqId),
    /// Not known: every step is formed by the scheduler.
    Open,
}

/// A request the engine aborted, why, and the engine's message.
pub type Aborted = (ReqId, frontend::FailReason, &'static str);

/// A scheduler: queues plus the engine's rule for forming a batch.
pub trait Scheduler: Send {
    /// An arrived request (its `priority`, at `now` seconds) joins the waiting queue.
    fn enqueue(&mut self, id: ReqId, priority: Option<i32>, now: f64);
    /// Forms the next batch at time `s.now` into `s.out` (cleared first).
    fn schedule(&mut self, s: &mut Step);
    /// A request finished (its KV is already released): forget it.
    fn finished(&mut self, id: ReqId);
    /// Requests waiting and running.
    fn queued(&self) -> (usize, usize);
    /// Drops the waiting head (it can never run, e.g. larger than the KV cache); returns it.
    fn reject_head(&mut self) -> Option<ReqId>;
    /// Moves into `out` the requests the engine aborted since the last call (SGLang's full
    /// waiting queue), each with why and the engine's message; they hold no KV. The default
    /// aborts none.
    fn take_aborted(&mut self, _out: &mut Vec<Aborted>) {}
    /// Whether a waiting request could be admitted in the steps after one that scheduled
    /// `decodes` decodes and nothing else (every running request), while nothing arrives,
    /// finishes or is preempted. The default does not say.
    fn admission(&self, _decodes: u32) -> Admission {
        Admission::Open
    }
    /// The step just formed at `now` runs until `end` (`None`: it has no forward): a KV tier's
    /// copies submitted with it start then.
    fn priced(&mut self, _now: f64, _end: Option<f64>) {}
    /// When the next KV-tier copy in flight ends, if any: an engine with nothing to run keeps
    /// stepping until then, so the instance forms a step again at that time.
    fn next_copy_end(&self) -> Option<f64> {
        None
    }
    /// `steps` steps were formed after the one in flight by a coalesced stretch, each the same
    /// decodes as the one before ([`Self::admission`] said no waiting request could enter):
    /// the engine accounts for the steps it did not form. The default keeps nothing per step.
    fn coalesced(&mut self, _steps: u32) {}
    /// The KV offloading tier's figures, for an engine that has one.
    fn offload_stats(&self) -> Option<vllm_offload::OffloadStats> {
        None
    }
    /// Swaps LMCache's remote server with `server` (one shared by the instances of a run is
    /// lent to each for its scheduler pass); whether the engine has one to swap with.
    fn lmcache_server_swap(&mut self, _server: &mut vllm_offload::lmcache::remote::LmServer) -> bool {
        false
    }
    /// The LoRA adapters' loads, for an engine serving them.
    fn lora_stats(&self) -> Option<vllm_lora::LoraStats> {
        None
    }
    /// The waiting requests the engine's metric counts (vLLM's `vllm:num_requests_waiting`
    /// leaves out those passed by and not scheduled since, `SchedulerStats.num_waiting_reqs`).
    fn waiting_metric(&self) -> usize {
        self.queued().0
    }
    /// What vLLM's `vllm:lora_requests_info` metric says: the adapters of the running and of
    /// the waiting requests (`reqs` their state), into `running` and `waiting`; returns
    /// `--max-loras` (0, the lists left alone, for an engine not serving LoRA).
    fn lora_adapters(&self, _reqs: &[ReqRt], _running: &mut Vec<u16>, _waiting: &mut Vec<u16>) -> u32 {
        0
    }
}

/// Builds the scheduler of an engine over a workload's tokens.
pub fn scheduler(cfg: &EngineConfig, store: std::sync::Arc<crate::workload::TokenStore>) -> Box<dyn Scheduler> {
    match cfg.engine {
        // TensorRT-LLM's capacity and micro-batch schedulers form vLLM v1's batch without
        // chunking, with admission reserving to completion (`Rules::trtllm_reserve_to_completion`).
        EngineKind::Vllm | EngineKind::Trtllm => Box::new(Vllm::new(vllm::VllmV1::new(*cfg), cfg.scheduling_policy)),
        EngineKind::VllmV0 => {
            let mut s = Vllm::new(vllm_v0::VllmV0::new(*cfg), SchedulingPolicy::Fcfs);
            s.q.async_output_proc = cfg.async_output_proc;
            Box::new(s)
        }
        EngineKind::Sglang => Box::new(sglang::Sglang::new(*cfg, store)),
        EngineKind::Lightllm => Box::new(lightllm::Lightllm::new(*cfg)),
    }
}

/// The prefix cache an engine runs unless told: vLLM's and TensorRT-LLM's paged blocks, SGLang's
/// radix tree, LightLLM's token pool; none under vLLM 0.8's V0 defaults (prefix caching off,
/// `Rules::vllm_v0_arg_defaults`).
pub fn default_policy(engine: EngineKind, version: EngineVersion) -> crate::cache::Policy {
    use crate::cache::Policy;
    if version.rules().vllm_v0_arg_defaults {
        return Policy::None;
    }
    match engine {
        EngineKind::Vllm | EngineKind::VllmV0 | EngineKind::Trtllm => Policy::Paged,
        EngineKind::Sglang => Policy::Radix,
        EngineKind::Lightllm => Policy::Token,
    }
}

/// The KV block size an engine runs with unless `--block-size` is given, where it is not
/// vLLM's 16 tokens: TensorRT-LLM's `tokens_per_block` 32.
pub fn default_block_size(engine: EngineKind) -> Option<u32> {
    (engine == EngineKind::Trtllm).then_some(trtllm::TOKENS_PER_BLOCK)
}

/// The longest request (prompt + output) an engine accepts unless told: the model's context,
/// LightLLM's `--max_req_total_len` default.
pub fn default_max_model_len(engine: EngineKind, model: &crate::catalog::Model) -> u64 {
    match engine {
        EngineKind::Lightllm => lightllm::MAX_REQ_TOTAL_LEN,
        _ => model.max_context,
    }
}

/// Whether the engine overlaps scheduling with the forward pass (`--async-scheduling`): vLLM
/// v1, SGLang and TensorRT-LLM by default, each off where its release turns it off for the
/// speculative method; refused for the engines that cannot, and where the release refuses it.
pub fn overlap(engine: EngineKind, version: EngineVersion, flags: &launch::EngineFlags) -> crate::error::Result<bool> {
    use crate::cost::spec::SpecAlgorithm;
    use crate::error::Error;
    // vLLM 0.18's host-side n-gram proposer runs synchronously (`Rules::vllm_sync_with_host_ngram`).
    let vllm_sync = engine == EngineKind::Vllm
        && version.rules().vllm_sync_with_host_ngram
        && flags.speculative == SpecAlgorithm::Ngram;
    Ok(match (engine, flags.overlap) {
        // SGLang turns its overlap schedule off under speculative decoding (EAGLE/MTP and n-gram:
        // server_args.py `_handle_speculative_decoding`, 0.4.x–0.5.x; only the opt-in
        // SGLANG_ENABLE_SPEC_V2 beta keeps it, which `--async-scheduling` then states).
        (EngineKind::Sglang, None) if flags.speculative != SpecAlgorithm::None => false,
        (EngineKind::Vllm, None) if vllm_sync => false,
        (EngineKind::Vllm, Some(true)) if vllm_sync => {
            return Err(Error::invalid(
                "--async-scheduling",
                format!(
                    "{version} refuses it with n-gram speculative decoding: \"Currently, async scheduling is only \
                     supported with EAGLE/MTP/Draft Model/NGram GPU kind of speculative decoding\" \
                     (vllm/config/vllm.py, VllmConfig.__post_init__); vllm@0.33 drafts n-grams on the GPU and allows it"
                ),
            ))
        }
        // TensorRT-LLM's PyTorch backend overlaps by default (`disable_overlap_scheduler` False).
        (EngineKind::Vllm | EngineKind::Sglang | EngineKind::Trtllm, None) => true,
        (EngineKind::Vllm | EngineKind::Sglang | EngineKind::Trtllm, Some(on)) => on,
        (_, None | Some(false)) => false,
        (_, Some(true)) => {
            return Err(Error::invalid(
                "--async-scheduling",
                "only vLLM v1 and SGLang overlap scheduling with the forward pass",
            ))
        }
    })
}

/// The launched engine's start-up refusals, each with the engine's own message
/// (docs/engines/refusals.md); LightLLM and TensorRT-LLM refuse nothing here.
pub fn check_start(s: &launch::Started) -> crate::error::Result<()> {
    match s.engine.engine {
        EngineKind::Vllm | EngineKind::VllmV0 => vllm::check_start(s),
        EngineKind::Sglang => sglang::launch::check_start(s),
        EngineKind::Lightllm | EngineKind::Trtllm => Ok(()),
    }
}

/// Starts `engine` (its bundle `version`) with `flags` on `machine`: the engine's own launch.
pub fn start(
    engine: EngineKind,
    version: EngineVersion,
    flags: &launch::EngineFlags,
    machine: &launch::Machine,
) -> crate::error::Result<launch::Launch> {
    match engine {
        EngineKind::Vllm | EngineKind::VllmV0 => vllm::launch(engine, version, flags, machine),
        EngineKind::Sglang => sglang::launch::launch(version, flags, machine),
        EngineKind::Lightllm => lightllm::launch(flags, machine),
        EngineKind::Trtllm => trtllm::launch(flags, machine),
    }
}
