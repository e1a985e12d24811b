//! One serving instance as a steppable unit: its scheduler, prefix cache and step-time model.
//! The driver ([`crate::sim`]) hands it arrived requests ([`Instance::enqueue`]), asks it to
//! form and price a step at a time ([`Instance::begin_step`]), and at that step's end applies
//! what the step did ([`Instance::end_step`]): computed tokens, sampled outputs, finished
//! requests freeing their KV. Between the two the cache holds the step's allocations, as the
//! engine's does while the GPU runs the batch, so a router reading it sees the engine's state at
//! that moment. Requests' runtime state ([`ReqRt`]) is shared by all instances of a run, indexed
//! by request id (a request is in one instance at a time).

use super::{Keep, LoadStats, ScheduledStep, StepRecord, TokenRecord, KV_FULL_SHARE};
use crate::cache::{CacheSpec, PrefixCache, ReqId};
use crate::cost::{BatchShape, CostModel};
use crate::engine::{scheduler, Batch, EngineConfig, ReqRt, Scheduler, Step};
use crate::metrics::{RequestRecord, TokenLog};
use crate::workload::{SeqId, Workload};

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

/// One serving instance.
pub struct Instance<'a> {
    pub role: Role,
    pub engine: EngineConfig,
    cost: &'a dyn CostModel,
    capacity: Option<u64>,
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
}

impl<'a> Instance<'a> {
    /// An idle instance over `w`'s tokens (`used`: the sequences a run of some of the requests
    /// sends, so only their blocks are numbered; `alone`: the only instance, which will touch
    /// most of its cache's content index).
    pub fn new(w: &Workload, spec: InstanceSpec<'a>, used: Option<&[SeqId]>, alone: bool) -> Self {
        let mut cache = spec.cache.build_sized(w.store.clone(), used, alone);
        cache.follow(&spec.engine);
        Self {
            role: spec.role,
            engine: spec.engine,
            cost: spec.cost,
            capacity: spec.cache.capacity_tokens,
            tracks_computed: cache.tracks_computed(),
            cache,
            sched: scheduler(&spec.engine, w.store.clone()),
            batch: Batch::default(),
            busy_until: None,
            composition: None,
            preemptions_before: Vec::new(),
            load: LoadStats::default(),
            stats: InstanceStats { role: spec.role, ..InstanceStats::default() },
            timeline: Vec::new(),
            schedule: Vec::new(),
        }
    }

    /// An arrived request joins the waiting queue.
    pub fn enqueue(&mut self, id: ReqId) {
        self.sched.enqueue(id);
    }

    /// Forms the next step at `now` and prices it. `may_reject`: a waiting head that cannot run
    /// in an idle engine can never run (false while memory is held for requests still to
    /// arrive, as a decode instance's pre-allocations: the head then waits).
    pub fn begin_step(&mut self, now: f64, rt: &mut [ReqRt], keep: Keep, may_reject: bool) -> Begun {
        debug_assert!(self.busy_until.is_none());
        if keep.schedule {
            self.preemptions_before.clear();
            self.preemptions_before.extend(rt.iter().map(|r| r.preemptions));
        }
        self.sched.schedule(&mut Step { now, reqs: rt, cache: self.cache.as_mut(), out: &mut self.batch });
        self.composition = keep.schedule.then(|| {
            let (waiting, running) = self.sched.queued();
            let before = &self.preemptions_before;
            ScheduledStep {
                items: self.batch.items.iter().map(|&(id, k)| (id, k, rt[id as usize].num_computed)).collect(),
                preempted: (0..rt.len() as ReqId)
                    .filter(|&i| rt[i as usize].preemptions > before[i as usize])
                    .collect(),
                usage_after_schedule: self.cache.usage(),
                waiting: waiting as u32,
                running: running as u32,
                ..Default::default()
            }
        });
        self.stats.preemptions += self.batch.preempted as u64;
        if self.batch.items.is_empty() {
            self.composition = None;
            if self.batch.preempted > 0 {
                return Begun::Retry;
            }
            let (waiting, running) = self.sched.queued();
            if running == 0 && waiting > 0 && may_reject {
                return Begun::RejectedHead(self.sched.reject_head().expect("a waiting request"));
            }
            return Begun::Idle;
        }
        let overlap = self.engine.overlap;
        let cost = self.cost;
        let price = |b: &BatchShape| if b.seqs == 0 { 0.0 } else { cost.step_time(b, overlap) };
        let dt = price(&self.batch.shape) + price(&self.batch.second_pass);
        self.stats.steps += 1;
        let held = {
            let u = self.cache.usage();
            u.used_tokens - u.evictable_tokens
        };
        self.stats.peak_kv_tokens = self.stats.peak_kv_tokens.max(held);
        self.load.busy_s += dt;
        if self.capacity.is_some_and(|c| c > 0 && held as f64 >= KV_FULL_SHARE * c as f64) {
            self.load.kv_full_s += dt;
        }
        if keep.steps {
            let (waiting, running) = self.sched.queued();
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
        let end = now + dt;
        self.busy_until = Some(end);
        Begun::Busy(end)
    }

    /// Applies the running step's effects at its end: computed tokens, one sampled token per
    /// request that computed its last known token, finished requests' KV freed.
    pub fn end_step(&mut self, rt: &mut [ReqRt], out: &mut Sink<'_>) {
        let end = self.busy_until.take().expect("a step is running");
        let mut sampled = 0;
        for &(id, k) in &self.batch.items {
            let r = &mut rt[id as usize];
            r.num_computed += k;
            if self.tracks_computed {
                self.cache.computed(id, r.num_computed as usize);
            }
            if r.num_computed < r.num_tokens {
                continue; // an unfinished prefill chunk samples nothing
            }
            let i = id as usize;
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
            if !prefill_only {
                r.generated += 1;
                sampled += 1;
                if !r.last_token_s.is_nan() {
                    out.log.gap(end - r.last_token_s);
                }
                if out.keep.tokens {
                    out.tokens.push(TokenRecord { id, index: r.generated - 1, time_s: end });
                }
            }
            if let Some(c) = self.composition.as_mut() {
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
                self.cache.finish(id);
                self.sched.finished(id);
                let q = &out.w.requests[i];
                if self.role == Role::Unified {
                    self.stats.prompt_tokens += q.prompt_len as u64;
                    self.stats.cached_prompt_tokens += r.cached_prompt_tokens as u64;
                }
                out.records.push(RequestRecord {
                    id,
                    send_s: out.send_s[i],
                    first_token_s: r.first_token_s,
                    last_token_s: end,
                    prompt_tokens: q.prompt_len,
                    output_tokens: r.output_len,
                    cached_prompt_tokens: r.cached_prompt_tokens,
                    preemptions: r.preemptions,
                    first_scheduled_s: r.first_scheduled_s,
                });
                out.finished.push(id);
            } else {
                r.num_tokens += 1;
            }
        }
        out.log.count(end, sampled);
        self.schedule.extend(self.composition.take());
    }
}
