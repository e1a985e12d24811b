//! One serving instance as a steppable unit: its scheduler, prefix cache and step-time model.
//! The driver ([`crate::sim`]) hands it arrived requests ([`Instance::enqueue`]), asks it to
//! form and price a step at a time ([`Instance::begin_step`]), and at that step's end applies
//! what the step did ([`Instance::end_step`]): computed tokens, sampled outputs, finished
//! requests freeing their KV. Between the two the cache holds the step's allocations, as the
//! engine's does while the GPU runs the batch, so a router reading it sees the engine's state at
//! that moment. Requests' runtime state ([`ReqRt`]) is shared by all instances of a run, indexed
//! by request id (a request is in one instance at a time). Under pipeline parallelism a vLLM
//! instance keeps up to PP batches in flight, as vLLM v1's batch queue does: it forms the next
//! batch at once over the requests not in flight, each batch enters a stage when the stage is
//! free, and batches end in order. Under speculative decoding a decode step yields the cost
//! model's expected tokens per step in one chunk. Under vLLM V0 multi-step scheduling a decode
//! batch runs several forward steps before the next scheduling ([`multistep`]), and under its
//! async output processing a batch's outputs are processed during the next batch
//! ([`async_out`]).

mod async_out;
mod coalesce;
mod multistep;
mod virtual_engines;

use super::{Keep, LoadStats, ScheduledStep, StepRecord, TokenRecord, KV_FULL_SHARE};
use crate::cache::{CacheSpec, PrefixCache, ReqId};
use crate::cost::{BatchShape, CostModel};
use crate::engine::vllm_offload::OffloadStats;
use crate::engine::{scheduler, Batch, EngineConfig, EngineKind, ReqRt, Scheduler, Step};
use crate::metrics::{RequestRecord, TokenLog};
use crate::workload::{SeqId, Workload};
use std::collections::VecDeque;

/// What an instance runs on.
#[derive(Clone, Copy)]
pub struct InstanceSpec<'a> {
    pub role: Role,
    pub engine: EngineConfig,
    pub cache: CacheSpec,
    pub cost: &'a dyn CostModel,
}

/// What [`Instance::begin_step`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Begun {
    /// A step runs until this time.
    Busy(f64),
    /// Every scheduled request was preempted: form a step again at the same time.
    Retry,
    /// The waiting head cannot run even alone: the engine rejected it (it left the queues).
    RejectedHead(ReqId),
    /// Nothing to run until another request arrives.
    Idle,
}

/// Where a finished step's effects go: the run's client-side records.
pub struct Sink<'r> {
    pub w: &'r Workload,
    pub keep: Keep,
    pub send_s: &'r [f64],
    pub log: &'r mut TokenLog,
    pub tokens: &'r mut Vec<TokenRecord>,
    pub records: &'r mut Vec<RequestRecord>,
    /// Requests that finished, in order.
    pub finished: &'r mut Vec<ReqId>,
    /// Requests a prefill instance finished, for their decode instance (their KV stays held
    /// until the driver releases it).
    pub handoff: &'r mut Vec<ReqId>,
    /// Requests that sampled their first token (their prefill is done).
    pub first_tokens: &'r mut Vec<ReqId>,
}

/// What an instance does for the requests it serves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Whole requests.
    #[default]
    Unified,
    /// Prefill of a disaggregated deployment: a request ends after its first token (which the
    /// client does not see), its KV held for the decode instance.
    Prefill,
    /// Decode of a disaggregated deployment.
    Decode,
}

/// Per-instance figures for the cluster report.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct InstanceStats {
    pub role: Role,
    /// Requests routed here.
    pub requests: u64,
    /// Prompt tokens of those requests, and the part reused from this instance's cache at
    /// first admission.
    pub prompt_tokens: u64,
    pub cached_prompt_tokens: u64,
    /// Time spent computing steps (seconds).
    pub busy_s: f64,
    /// Most KV tokens held by requests after any step was formed.
    pub peak_kv_tokens: u64,
    pub preemptions: u64,
    pub steps: u64,
}

/// A batch formed while earlier ones still run (vLLM v1 under PP): its requests' computed
/// tokens were advanced when it was formed, so the scheduler leaves them out of the next batch
/// (`Scheduler.schedule`: new tokens = known − computed), as vLLM does.
struct Queued {
    batch: Batch,
    end: f64,
    composition: Option<ScheduledStep>,
    progress: Progress,
}

/// A batch in flight's items as scheduled: each request's computed tokens after it and its
/// preemption count then (a request preempted since yields nothing). Empty with one batch in
/// flight at most, where computed tokens advance at the step's end.
#[derive(Default)]
struct Progress {
    after: Vec<u32>,
    preemptions: Vec<u32>,
}

/// One serving instance.
pub struct Instance<'a> {
    pub role: Role,
    /// Tokens per KV block (page) of its cache.
    pub block_tokens: u64,
    pub engine: EngineConfig,
    cost: &'a dyn CostModel,
    pub(crate) capacity: Option<u64>,
    pub cache: Box<dyn PrefixCache>,
    tracks_computed: bool,
    pub sched: Box<dyn Scheduler>,
    batch: Batch,
    /// When the running step ends (`None`: idle).
    pub busy_until: Option<f64>,
    /// The step being run, recorded at its end.
    composition: Option<ScheduledStep>,
    preemptions_before: Vec<u32>,
    pub load: LoadStats,
    pub stats: InstanceStats,
    pub timeline: Vec<StepRecord>,
    pub schedule: Vec<ScheduledStep>,
    /// Speculative decoding: expected extra tokens per decode step (tokens per step − 1), and
    /// each request's fractional credit of them, by request id.
    spec_extra: f64,
    spec_credit: Vec<f64>,
    /// Batches in flight at most (PP stages under vLLM v1; 1 otherwise), those behind the
    /// running one, and when each pipeline stage is next free.
    max_in_flight: usize,
    queued: VecDeque<Queued>,
    stage_free: Vec<f64>,
    /// The running batch's [`Progress`].
    progress: Progress,
    /// A multi-step batch's step end times (empty for a one-step batch).
    step_ends: Vec<f64>,
    /// vLLM V0 async output processing (a unified instance with it on): the last batch's
    /// outputs not yet processed, and when the running batch's callback processes them (its
    /// first forward's launch, after the host part).
    async_out: bool,
    pending: Vec<async_out::Pending>,
    pending_at: Option<f64>,
    /// When the running batch's first forward pass starts (after its host part).
    forward_s: f64,
    /// Stopped and not serving yet ([`Instance::crash`]); routers leave it out.
    pub down: bool,
    /// Out of the router's list while it finishes what it holds (a rolling restart).
    pub draining: bool,
    /// Lives so far (0 until the first failure): a step begun in an earlier life never ends.
    pub generation: u32,
    /// The cache counters of its earlier lives, and its KV offloading tier's.
    retired_cache: Option<crate::cache::CacheStats>,
    retired_offload: Option<OffloadStats>,
    retired_hicache: Option<crate::cache::hicache::HostTierStats>,
    /// The LoRA loads of its earlier lives.
    retired_lora: Option<crate::engine::vllm_lora::LoraStats>,
    /// Buffers reused by [`Instance::coalesce`].
    stretch: coalesce::Stretch,
    /// Steps formed inside coalesced stretches.
    pub coalesced_steps: u64,
    /// vLLM V0's virtual engines under PP (none otherwise).
    ves: virtual_engines::VirtualEngines,
}

impl<'a> Instance<'a> {
    /// An idle instance over `w`'s tokens (`used`: the sequences a run of some of the requests
    /// sends, so only their blocks are numbered; `alone`: the only instance, which will touch
    /// most of its cache's content index).
    pub fn new(w: &Workload, spec: InstanceSpec<'a>, used: Option<&[SeqId]>, alone: bool) -> Self {
        let n_ves = spec.engine.virtual_engines as usize;
        let cache_spec = if n_ves > 1 { virtual_engines::share(spec.cache, n_ves) } else { spec.cache };
        let make_cache = || {
            let mut cache = cache_spec.build_sized(w.store.clone(), used, alone);
            cache.follow(&spec.engine.rules.cache_rules(spec.engine.engine));
            cache
        };
        let mut cache = make_cache();
        if let Some(h) = spec.engine.hicache {
            let attached = cache.attach_host_tier(h);
            debug_assert!(attached, "config::resolve allows HiCache on the radix cache alone");
            if let Some(st) = spec.engine.hicache_storage {
                let attached = cache.attach_storage(st);
                debug_assert!(attached, "a storage tier sits under a host tier");
            }
        }
        Self {
            role: spec.role,
            block_tokens: spec.cache.block_size.or(spec.cache.page_size).unwrap_or(1).max(1) as u64,
            engine: spec.engine,
            cost: spec.cost,
            capacity: spec.cache.capacity_tokens.map(|c| {
                if n_ves > 1 {
                    cache_spec.capacity_tokens.unwrap_or(c) * n_ves as u64
                } else {
                    c
                }
            }),
            tracks_computed: cache.tracks_computed(),
            cache,
            sched: scheduler(&spec.engine, w.store.clone()),
            batch: Batch::within(spec.cost.local_window()),
            busy_until: None,
            composition: None,
            preemptions_before: Vec::new(),
            load: LoadStats::default(),
            stats: InstanceStats { role: spec.role, ..InstanceStats::default() },
            timeline: Vec::new(),
            schedule: Vec::new(),
            spec_extra: (spec.cost.tokens_per_step() - 1.0).max(0.0),
            spec_credit: Vec::new(),
            max_in_flight: if spec.engine.engine == EngineKind::Vllm {
                spec.cost.in_flight_batches().max(1)
            } else {
                n_ves.max(1)
            },
            queued: VecDeque::new(),
            stage_free: Vec::new(),
            progress: Progress::default(),
            step_ends: Vec::new(),
            async_out: spec.engine.async_output_proc && spec.role == Role::Unified,
            pending: Vec::new(),
            pending_at: None,
            forward_s: 0.0,
            down: false,
            draining: false,
            generation: 0,
            retired_cache: None,
            retired_offload: None,
            retired_hicache: None,
            retired_lora: None,
            stretch: coalesce::Stretch::default(),
            coalesced_steps: 0,
            ves: virtual_engines::VirtualEngines::new(n_ves, || {
                (scheduler(&spec.engine, w.store.clone()), make_cache())
            }),
        }
    }

    /// The instance stops at `now` (it crashed, or a rolling restart stops it): its engine and
    /// cache start again as `fresh` (empty) and it is down; the figures it gathered are kept,
    /// and the step it was running counts as busy up to `now` only. Its requests' state is the
    /// driver's to settle.
    pub fn crash(&mut self, now: f64, fresh: Instance<'a>) {
        if let Some(end) = self.busy_until {
            self.load.busy_s -= (end - now).max(0.0);
        }
        let old = std::mem::replace(self, fresh);
        let mut cache = old.live_cache_stats();
        if let Some(before) = &old.retired_cache {
            cache.merge(before);
        }
        self.retired_cache = Some(cache);
        self.retired_offload = old.offload_stats();
        self.retired_hicache = old.hicache_stats();
        self.retired_lora = old.lora_stats();
        self.stats = old.stats;
        self.load = old.load;
        self.timeline = old.timeline;
        self.schedule = old.schedule;
        self.coalesced_steps = old.coalesced_steps;
        self.generation = old.generation + 1;
        self.down = true;
    }

    /// Holds nothing: no batch in flight, no request waiting or running.
    pub fn is_empty(&self) -> bool {
        self.busy_until.is_none() && self.queued() == (0, 0)
    }

    /// The cache counters over every life of the instance.
    pub fn cache_stats(&self) -> crate::cache::CacheStats {
        let mut s = self.live_cache_stats();
        if let Some(before) = &self.retired_cache {
            s.merge(before);
        }
        s
    }

    /// The KV offloading tier's figures over every life of the instance, if it has one.
    pub fn offload_stats(&self) -> Option<OffloadStats> {
        let mut s = self.sched.offload_stats()?;
        if let Some(before) = &self.retired_offload {
            s.merge(before);
        }
        Some(s)
    }

    /// When a KV tier's copy in flight next needs a step while the engine has nothing to run
    /// (the scheduler's, vLLM's connector; or the cache's, SGLang's HiCache), if any.
    pub fn next_copy_end(&self) -> Option<f64> {
        match (self.sched.next_copy_end(), self.cache.next_copy_end()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// SGLang's HiCache figures over every life of the instance, if it has the tier.
    pub fn hicache_stats(&self) -> Option<crate::cache::hicache::HostTierStats> {
        let mut s = self.cache.host_tier_stats()?;
        if let Some(before) = &self.retired_hicache {
            s.merge(before);
        }
        Some(s)
    }

    /// The LoRA adapters' loads over every life of the instance, if it serves them.
    pub fn lora_stats(&self) -> Option<crate::engine::vllm_lora::LoraStats> {
        let mut s = self.sched.lora_stats()?;
        if let Some(before) = &self.retired_lora {
            s.add(before);
        }
        Some(s)
    }

    /// Request `id` (its state `r`) arrived at `now`: it joins the waiting queue.
    pub fn enqueue(&mut self, id: ReqId, r: &ReqRt, now: f64) {
        self.activate_for_arrival();
        self.sched.enqueue(id, r.priority, now);
    }

    /// Whether another batch can be formed now: none in flight, or fewer than the pipeline
    /// keeps.
    pub fn can_schedule(&self) -> bool {
        self.busy_until.is_none() || self.queued.len() + 1 < self.max_in_flight
    }

    /// Forms the next step at `now` and prices it. Under PP (vLLM v1) it may join batches
    /// already in flight: it enters each stage when the stage is free. `may_reject`: a waiting
    /// head that cannot run in an idle engine can never run (false while memory is held for
    /// requests still to arrive, as a decode instance's pre-allocations: the head then waits).
    pub fn begin_step(&mut self, now: f64, rt: &mut [ReqRt], keep: Keep, may_reject: bool) -> Begun {
        debug_assert!(self.can_schedule());
        let mut form = |x: &mut Self| {
            if x.busy_until.is_some() {
                x.begin_queued(now, rt, keep)
            } else {
                x.begin_step_alone(now, rt, keep, false, may_reject)
            }
        };
        if self.has_virtual_engines() {
            return self.begin_on_free_engine(form);
        }
        form(self)
    }

    /// Forms and prices a step into `self.batch`; `queued`: behind batches in flight (the
    /// caller keeps it), else the running step.
    fn begin_step_alone(&mut self, now: f64, rt: &mut [ReqRt], keep: Keep, queued: bool, may_reject: bool) -> Begun {
        if keep.schedule {
            self.preemptions_before.clear();
            self.preemptions_before.extend(rt.iter().map(|r| r.preemptions));
        }
        self.sched.schedule(&mut Step { now, reqs: rt, cache: self.cache.as_mut(), out: &mut self.batch });
        self.composition = keep.schedule.then(|| {
            let before = &self.preemptions_before;
            let preempted =
                (0..rt.len() as ReqId).filter(|&i| rt[i as usize].preemptions > before[i as usize]).collect();
            self.composed(self.batch.items.iter().map(|&(id, k)| (id, k, rt[id as usize].num_computed)), preempted)
        });
        self.stats.preemptions += self.batch.preempted as u64;
        if self.async_out && !self.batch.processed.is_empty() {
            self.processed_early(now, rt);
        }
        if self.batch.items.is_empty() {
            self.composition = None;
            self.sched.priced(now, None);
            if self.batch.preempted > 0 {
                return Begun::Retry;
            }
            if !self.pending.is_empty() {
                // Nothing scheduled: the pending outputs are processed now (`LLMEngine.step`),
                // by an empty batch ending at once.
                self.pending_at = Some(now);
                self.busy_until = Some(now);
                return Begun::Busy(now);
            }
            let (waiting, running) = self.sched.queued();
            // A KV tier's copy still in flight may yet let the head in.
            if running == 0 && waiting > 0 && may_reject && self.next_copy_end().is_none() {
                let id = self.sched.reject_head().expect("a waiting request");
                if self.engine.offload.is_some() && rt[id as usize].num_computed > 0 {
                    // Its load landed, but what it holds cannot grow to its whole sequence.
                    self.cache.finish(id);
                    rt[id as usize].num_computed = 0;
                }
                return Begun::RejectedHead(id);
            }
            return Begun::Idle;
        }
        let overlap = self.engine.overlap;
        let cost = self.cost;
        let mut dt = self.price(&self.batch.shape) + self.price(&self.batch.second_pass);
        let end = if self.batch.steps() > 1 {
            debug_assert!(self.max_in_flight == 1, "multi-step runs one batch at a time");
            dt = self.price_multi_step(now, rt);
            now + dt
        } else if self.max_in_flight > 1 {
            let mut stages = cost.pipeline_stages(&self.batch.shape, overlap);
            stages[0] += self.price(&self.batch.second_pass);
            let last = self.stage_free.last().copied().unwrap_or(0.0);
            let end = self.through_stages(now, &stages);
            // Busy time: what this batch adds beyond the pipeline's previous end.
            dt = end - last.max(now);
            end
        } else {
            if self.async_out {
                let device = |b: &BatchShape| if b.seqs == 0 { 0.0 } else { cost.step_parts(b).device_s };
                self.forward_s = now + (dt - device(&self.batch.shape) - device(&self.batch.second_pass)).max(0.0);
            }
            // A KV tier's flush holds the forward back (the engine is blocked meanwhile), as do
            // the adapter loads the batch needs.
            dt = dt.max(self.batch.overlap_load_s);
            dt += (self.batch.wait_until - now).max(0.0) + self.batch.load_s;
            now + dt
        };
        if self.async_out && !self.pending.is_empty() {
            self.pending_at = Some(self.forward_s);
        }
        self.account(now, dt, keep);
        if self.max_in_flight > 1 {
            // vLLM advances computed tokens when it schedules: a request in flight has no new
            // token for the next batch.
            self.progress.after.clear();
            self.progress.preemptions.clear();
            for &(id, k) in &self.batch.items {
                let r = &mut rt[id as usize];
                r.num_computed += k;
                self.progress.after.push(r.num_computed);
                self.progress.preemptions.push(r.preemptions);
            }
        }
        self.sched.priced(now, Some(end));
        if !queued {
            self.busy_until = Some(end);
        }
        Begun::Busy(end)
    }

    /// The record of a step just formed: its `items` (request, new tokens, computed before)
    /// and the requests `preempted` forming it, with the cache and queues as they are now.
    fn composed(&self, items: impl Iterator<Item = (ReqId, u32, u32)>, preempted: Vec<ReqId>) -> ScheduledStep {
        let (waiting, running) = self.queued();
        ScheduledStep {
            items: items.collect(),
            preempted,
            usage_after_schedule: self.kv_usage(),
            window_after_schedule: self.cache.window_usage(),
            states_after_schedule: self.cache.state_usage(),
            host_tokens_after_schedule: self.cache.host_tokens(),
            waiting: waiting as u32,
            running: running as u32,
            ..Default::default()
        }
    }

    /// A batch's price: the cost model's step time, 0 with no sequence; a decode batch the
    /// engine runs without a CUDA graph takes at least the eager launch of its kernels.
    fn price(&self, b: &BatchShape) -> f64 {
        if b.seqs == 0 {
            0.0
        } else if b.prefill_tokens == 0 && !self.engine.decode_graphs.captures(b.seqs) {
            let p = self.cost.step_parts(b);
            crate::cost::StepTime { device_s: p.device_s.max(self.cost.eager_step_launch_s()), ..p }
                .total(self.engine.overlap)
        } else {
            self.cost.step_time(b, self.engine.overlap)
        }
    }

    /// Books the batch just formed at `now`, busy for `dt`: its steps, the KV held (and its
    /// peak), busy and KV-full time, and its timeline record when kept.
    fn account(&mut self, now: f64, dt: f64, keep: Keep) {
        let held = self.held_kv_tokens();
        self.account_held(now, dt, keep, held);
    }

    /// KV tokens held by requests (the cache's use less what it could evict).
    fn held_kv_tokens(&self) -> u64 {
        let u = self.kv_usage();
        u.used_tokens - u.evictable_tokens
    }

    /// [`account`](Self::account) with the KV held already known.
    fn account_held(&mut self, now: f64, dt: f64, keep: Keep, held: u64) {
        self.stats.steps += self.batch.steps() as u64;
        self.stats.peak_kv_tokens = self.stats.peak_kv_tokens.max(held);
        self.load.busy_s += dt;
        if self.capacity.is_some_and(|c| c > 0 && held as f64 >= KV_FULL_SHARE * c as f64) {
            self.load.kv_full_s += dt;
        }
        if keep.steps {
            let (waiting, running) = self.queued();
            let b = &self.batch;
            self.timeline.push(StepRecord {
                start_s: now,
                duration_s: dt,
                batch_size: b.shape.seqs + b.second_pass.seqs,
                prefill_tokens: b.shape.prefill_tokens + b.second_pass.prefill_tokens,
                decode_tokens: b.shape.decode_seqs + b.second_pass.decode_seqs,
                kv_used_tokens: held,
                waiting: waiting as u32,
                running: running as u32,
            });
        }
    }

    /// A batch formed while others are in flight: scheduled now over the requests not in
    /// flight, its tokens counted as computed at once, priced through the pipeline stages.
    fn begin_queued(&mut self, now: f64, rt: &mut [ReqRt], keep: Keep) -> Begun {
        let running = std::mem::take(&mut self.batch);
        let composition = self.composition.take();
        let progress = std::mem::take(&mut self.progress);
        let begun = self.begin_step_alone(now, rt, keep, true, false);
        let batch = std::mem::replace(&mut self.batch, running);
        let formed_composition = std::mem::replace(&mut self.composition, composition);
        let formed_progress = std::mem::replace(&mut self.progress, progress);
        if let Begun::Busy(end) = begun {
            self.queued.push_back(Queued { batch, end, composition: formed_composition, progress: formed_progress });
        }
        begun
    }

    /// When a batch entering the pipeline at `now` leaves it, its stage times `stages`.
    fn through_stages(&mut self, now: f64, stages: &[f64]) -> f64 {
        if self.stage_free.len() < stages.len() {
            self.stage_free.resize(stages.len(), 0.0);
        }
        let mut t = now;
        for (free, d) in self.stage_free.iter_mut().zip(stages) {
            t = t.max(*free) + d;
            *free = t;
        }
        t
    }

    /// Speculative decoding: the extra tokens a decode step of `id` yields beyond its own — the
    /// expected accepted drafts, dealt out deterministically (each request accrues
    /// tokens per step − 1 a step and takes the whole part), no more than its output has left
    /// and only when the cache can hold them (their KV was computed by the verify pass).
    fn accepted_drafts(&mut self, id: ReqId, r: &ReqRt, before: u32) -> u32 {
        if self.spec_extra <= 0.0 {
            return 0;
        }
        let i = id as usize;
        if self.spec_credit.len() <= i {
            self.spec_credit.resize(i + 1, 0.0);
        }
        let credit = self.spec_credit[i] + self.spec_extra;
        let whole = (credit.floor() as u32).min(r.output_len.saturating_sub(r.generated + 1));
        if whole == 0 || !self.cache.grow(id, (before + whole) as usize + 1) {
            self.spec_credit[i] = credit.min(self.spec_extra + 1.0);
            return 0;
        }
        self.spec_credit[i] = credit - whole as f64;
        whole
    }

    /// Notes in the running step's record (when kept) that it sampled a token of `id`
    /// (`sampled`) and that `id` finished.
    fn note_sampled(&mut self, id: ReqId, sampled: bool, finished: bool) {
        if let Some(c) = self.composition.as_mut() {
            if sampled {
                c.sampled.push(id);
            }
            if finished {
                c.finished.push(id);
            }
        }
    }

    /// Applies the running step's effects at its end: computed tokens, one sampled token per
    /// request that computed its last known token — more in one chunk for a decoding request
    /// under speculative decoding — finished requests' KV freed.
    pub fn end_step(&mut self, rt: &mut [ReqRt], out: &mut Sink<'_>) {
        self.activate_ending();
        let end = self.busy_until.take().expect("a step is running");
        if self.async_out {
            self.deliver_pending(rt, out, end);
            if self.batch.items.is_empty() {
                return; // the empty batch that processed them
            }
        }
        let mut sampled = 0;
        let pre_advanced = !self.progress.after.is_empty();
        let multi = self.batch.steps() > 1;
        if multi {
            self.end_multi_step(rt, out);
        }
        for idx in 0..if multi { 0 } else { self.batch.items.len() } {
            let (id, k) = self.batch.items[idx];
            if pre_advanced && rt[id as usize].preemptions != self.progress.preemptions[idx] {
                continue; // preempted while in flight: its output is dropped
            }
            if self.rides(&rt[id as usize]) {
                continue; // finished in the batch before (`finished_before`): nothing to do
            }
            let before = if pre_advanced { self.progress.after[idx] - k } else { rt[id as usize].num_computed };
            // A decode step (one token after at least one output) verifies drafts.
            let r = &rt[id as usize];
            let drafts = if k == 1 && r.generated > 0 && before + 1 == r.num_tokens {
                self.accepted_drafts(id, &rt[id as usize], before)
            } else {
                0
            };
            let r = &mut rt[id as usize];
            if !pre_advanced {
                r.num_computed += k;
            }
            let computed = before + k;
            if self.tracks_computed {
                self.cache.computed(id, computed as usize);
            }
            if computed < r.num_tokens {
                continue; // an unfinished prefill chunk samples nothing
            }
            if self.role == Role::Prefill {
                // The first token goes with the KV to the decode instance (SGLang) or is
                // dropped by the proxy (vLLM); the client sees neither here.
                r.generated += 1;
                self.sched.finished(id);
                self.stats.prompt_tokens += r.prompt_len as u64;
                self.stats.cached_prompt_tokens += r.cached_prompt_tokens as u64;
                out.handoff.push(id);
                continue;
            }
            // SGLang's max_new_tokens 0: done when the prompt is computed, no token sampled.
            let prefill_only = r.output_len == 0;
            if self.async_out && !prefill_only {
                // The token joins the sequence unchecked (`_advance_to_next_step`): a request
                // whose output is complete looks like a decode until its output is processed.
                r.generated += 1;
                r.num_tokens += 1;
                self.pend(id, 1, r.generated == r.output_len);
                continue;
            }
            if !prefill_only {
                // The accepted drafts' KV is computed: they join the sequence with the new token,
                // all in one chunk (one inter-token gap, or one per token, as the client counts).
                r.num_computed += drafts;
                r.num_tokens += drafts;
                r.generated += 1 + drafts;
                sampled += 1 + drafts;
                if !r.last_token_s.is_nan() {
                    out.log.chunk(end - r.last_token_s, 1 + drafts as u64);
                }
                if out.keep.tokens {
                    for t in 0..=drafts {
                        out.tokens.push(TokenRecord { id, index: r.generated - 1 - drafts + t, time_s: end });
                    }
                }
            }
            self.note_sampled(id, !prefill_only, r.generated == r.output_len);
            if r.first_token_s.is_nan() {
                r.first_token_s = end;
                out.first_tokens.push(id);
            }
            r.last_token_s = end;
            if r.generated == r.output_len {
                self.complete(id, r, end, true, out);
            } else {
                r.num_tokens += 1;
            }
        }
        out.log.count(end, sampled);
        self.schedule.extend(self.composition.take());
        // The next batch in flight becomes the running one.
        if let Some(q) = self.queued.pop_front() {
            self.batch = q.batch;
            self.busy_until = Some(q.end);
            self.composition = q.composition;
            self.progress = q.progress;
        } else {
            self.progress.after.clear();
            self.progress.preemptions.clear();
        }
    }
}
