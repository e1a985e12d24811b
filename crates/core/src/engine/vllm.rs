//! vLLM v1 scheduler (ENGINE_SPEC §2.1). One token budget per step: running requests first,
//! in admission order (decodes and unfinished prefill chunks alike), each taking
//! `min(remaining, budget)` tokens; when KV cannot grow, the *last* running request is
//! preempted (recompute: blocks freed, outputs kept, prepended to waiting) until it fits or
//! the request itself was the victim. Waiting requests are admitted in FCFS order only when
//! nothing was preempted in this step, under `max_num_seqs`, with their prefix-cache hit free
//! of budget; the first that cannot be allocated blocks everyone behind it. Per bundle
//! ([`Rules`](super::Rules)): vLLM 0.19+ admits a waiting (new or preempted) request only when
//! blocks for all its known tokens, less its hits, are free (`scheduler_reserve_full_isl`,
//! `KVCacheManager.allocate_slots(..., full_sequence_must_fit=True)`); before, when its first
//! chunk fits. vLLM 0.33 caps no chunk by `long_prefill_token_threshold` in a step that begins
//! with a single request running or waiting (`Scheduler.schedule`). TensorRT-LLM 1.0 runs this
//! rule without chunking and with admission to completion ([`Rules::trtllm_reserve_to_completion`](super::Rules)):
//! its capacity scheduler's running requests first, then waiting ones in order, stopping at the
//! first whose blocks to completion do not fit; its micro-batch scheduler's one token per
//! generation request and whole prompts under `max_num_tokens`, stopping at the first that does
//! not fit; `max_batch_size` requests at most (docs/engines/trtllm.md).

use super::launch::{EngineFlags, Launch, Machine, Started};
use super::vllm_lora::{LoraStats, Resident, Scheduled};
use super::vllm_offload::lmcache::Lmcache;
use super::vllm_offload::{Connector, Lookup, OffloadBackend, OffloadStats, Waiting};
use super::{Admission, EngineConfig, EngineKind, EngineVersion, SchedulingPolicy, Step, VllmQueues, VllmRule};
use crate::cache::ReqId;
use crate::catalog::Model;
use crate::cost::spec::SpecAlgorithm;
use crate::error::{Error, Result};
use crate::vllm_memory::{ProfileRun, VllmMemory};

/// The launch of both vLLM engines (v1 and V0 share their limits and memory budget): the
/// device class's batch limits, then vLLM's memory budget from its profile run, the KV pool
/// what the budget leaves (ENGINE_SPEC §2.2, `gpu_worker.py` `determine_available_memory`).
/// Without chunked prefill (V0's default) the token budget covers a whole prompt.
pub fn launch(engine: EngineKind, version: EngineVersion, flags: &EngineFlags, m: &Machine) -> Result<Launch> {
    // A model with linear layers runs at the block size its state raised the given one to,
    // which `config` checked before raising it.
    if m.model.linear_layers() == 0 {
        check_block_size(engine, flags.block_size)?;
    }
    let chunked = chunked_prefill(engine, version, flags, m.model, m.max_model_len);
    let large = m.gpu.vllm_large() && !version.rules().vllm_v0_arg_defaults;
    let (seqs, tokens) = limits(flags, chunked, large, m.max_model_len)?;
    let run = ProfileRun {
        max_num_batched_tokens: tokens,
        max_num_seqs: seqs,
        cudagraph_estimate: version.rules().vllm_cudagraph_memory_estimate,
    };
    let mem = VllmMemory::laid_out(
        m.gpu,
        m.model,
        m.layout.parallel,
        m.kv_bytes_per_token_per_rank,
        m.gpu_memory_utilization,
        run,
        flags.memory,
    );
    let mem = if m.lora_slot_bytes_per_rank > 0 { mem.with_lora(m.lora_slot_bytes_per_rank) } else { mem };
    let kv = mem.kv_cache_bytes / mem.kv_bytes_per_token_per_rank * m.dp();
    Ok(Launch {
        max_num_seqs: seqs,
        max_num_batched_tokens: tokens,
        chunked_prefill_size: 0,
        kv_tokens: kv,
        profiled_kv_tokens: kv,
        mem_fraction_static: None,
        vllm_memory: Some((mem, run)),
    })
}

/// The block sizes `vllm serve --block-size` takes: `BlockSize = Literal[1, 8, 16, 32, 64, 128,
/// 256]` (`vllm/config/cache.py`, the v1 bundles); 0.9, the V0 bundle, had no 256
/// (`vllm/config.py`). Its argument parser refuses any other (`invalid choice`).
pub fn block_sizes(engine: EngineKind) -> &'static [u32] {
    match engine {
        EngineKind::VllmV0 => &[1, 8, 16, 32, 64, 128],
        _ => &[1, 8, 16, 32, 64, 128, 256],
    }
}

/// `--block-size` among vLLM's choices, refused with its parser's words otherwise.
pub(crate) fn check_block_size(engine: EngineKind, block_size: u32) -> Result<()> {
    let sizes = block_sizes(engine);
    if sizes.contains(&block_size) {
        return Ok(());
    }
    let list: Vec<String> = sizes.iter().map(u32::to_string).collect();
    Err(Error::invalid(
        "--block-size",
        format!(
            "{block_size} is not a vLLM block size: vllm serve refuses it (argument --block-size: invalid choice: \
             {block_size} (choose from {}))",
            list.join(", ")
        ),
    ))
}

/// Whether chunked prefill is on: `--enable-chunked-prefill` if given, else vLLM v1 always and
/// V0 never — but under vLLM 0.8's V0 defaults (`Rules::vllm_v0_arg_defaults`,
/// `EngineArgs._set_default_args_v0`) a model over 32K context chunks unless it has an MLA
/// latent, sliding-window layers or a speculative draft.
pub fn chunked_prefill(
    engine: EngineKind,
    version: EngineVersion,
    flags: &EngineFlags,
    model: &Model,
    max_model_len: u64,
) -> bool {
    flags.enable_chunked_prefill.unwrap_or_else(|| match engine {
        EngineKind::VllmV0 if version.rules().vllm_v0_arg_defaults => {
            max_model_len > 32768 && !model.is_mla() && !model.is_hybrid() && flags.speculative == SpecAlgorithm::None
        }
        _ => engine == EngineKind::Vllm,
    })
}

/// vLLM serve's limits by device class (`large`: 1,024 sequences and 8,192 tokens), then its
/// post-processing (ENGINE_SPEC §2.2).
fn limits(flags: &EngineFlags, chunked: bool, large: bool, max_model_len: u64) -> Result<(u32, u32)> {
    let (seqs_default, tokens_default) = if large { (1024, 8192) } else { (256, 2048) };
    let mut max_num_seqs = flags.max_num_seqs.unwrap_or(seqs_default);
    let mut max_num_batched_tokens = flags.max_num_batched_tokens.unwrap_or(tokens_default);
    if flags.max_num_batched_tokens.is_none() {
        if !chunked {
            max_num_batched_tokens = max_num_batched_tokens.max(max_model_len.min(u32::MAX as u64) as u32);
        }
        max_num_batched_tokens = (max_num_batched_tokens as u64)
            .min((max_num_seqs as u64).saturating_mul(max_model_len))
            .min(u32::MAX as u64) as u32;
    }
    if flags.max_num_seqs.is_none() {
        max_num_seqs = max_num_seqs.min(max_num_batched_tokens);
    }
    if flags.max_num_seqs == Some(0) {
        return Err(Error::invalid("--max-num-seqs", "0 must be at least 1"));
    }
    if max_num_seqs == 0 || max_num_batched_tokens < max_num_seqs {
        return Err(Error::invalid(
            "--max-num-batched-tokens",
            format!("{max_num_batched_tokens} must be at least --max-num-seqs ({max_num_seqs})"),
        ));
    }
    Ok((max_num_seqs, max_num_batched_tokens))
}

/// vLLM's start-up refusals (docs/engines/refusals.md), both engines: a `max_model_len` above
/// the model's (`ModelConfig` validation), without chunked prefill a step budget below
/// `max_model_len` (`SchedulerConfig._verify_args`), and one `max_model_len` sequence that
/// cannot fit the KV cache (`_check_enough_kv_cache_memory`), which vLLM checks before applying
/// `--num-gpu-blocks-override` (so it starts with any override).
pub fn check_start(s: &Started) -> Result<()> {
    let refuse = |message: String| s.refuse(message);
    if s.max_model_len > s.model.max_context {
        return refuse(format!(
            "User-specified max_model_len ({}) is greater than the derived max_model_len \
             (max_position_embeddings={} or model_max_length=None in model's config.json). To allow \
             overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. \
             VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative \
             position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If the model \
             uses absolute position encoding, positions exceeding derived_max_model_len will cause a CUDA \
             array out-of-bounds error.",
            s.max_model_len, s.model.max_context
        ));
    }
    if !s.engine.enable_chunked_prefill && (s.engine.max_num_batched_tokens as u64) < s.max_model_len {
        return refuse(format!(
            "max_num_batched_tokens ({}) is smaller than max_model_len ({}). This effectively limits the \
             maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. \
             Please increase max_num_batched_tokens or decrease max_model_len.",
            s.engine.max_num_batched_tokens, s.max_model_len
        ));
    }
    let block = s.block_size.unwrap_or(1) as u64;
    let needed_tokens = s.max_model_len.div_ceil(block) * block;
    if needed_tokens <= s.kv_capacity_tokens {
        return Ok(());
    }
    let fits = s.kv_capacity_tokens / block * block;
    let bytes = |t: u64| t as f64 * s.kv_bytes_per_token_per_rank as f64;
    // vLLM checks memory before applying --num-gpu-blocks-override, so it starts with any
    // override (`notes` says when a longest request could never fit).
    if s.blocks_overridden {
        return Ok(());
    }
    let estimate = if fits > 0 {
        format!("Based on the available memory, the estimated maximum model length is {fits}. ")
    } else {
        String::new()
    };
    refuse(format!(
        "To serve at least one request with the models's max seq len ({}), ({} GiB KV cache is needed, \
         which is larger than the available KV cache memory ({} GiB). {estimate}Try increasing \
         `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. \
         (cachesim: pass --max-model-len {fits}.)",
        s.max_model_len,
        format_gib(bytes(needed_tokens)),
        format_gib(bytes(s.kv_capacity_tokens)),
    ))
}

/// vLLM's `format_gib`: bytes in GiB with two decimals.
fn format_gib(bytes: f64) -> String {
    format!("{:.2}", bytes / (1u64 << 30) as f64)
}

/// The v1 rule, with its KV connector when CPU offloading is on: vLLM's own, or LMCache's.
pub struct VllmV1 {
    cfg: EngineConfig,
    offload: Option<Connector>,
    lmcache: Option<Lmcache>,
    /// Waiting requests passed by in the step being formed, from the waiting queue and from
    /// those holding KV blocks (`step_skipped_waiting`, `step_skipped_kv_holding`).
    skipped: Vec<ReqId>,
    skipped_holding: Vec<ReqId>,
    /// Under LoRA: the adapters resident on the worker, and those the running requests hold.
    lora: Option<(Resident, Scheduled)>,
    /// The adapters of the batch being formed, in batch order.
    batch_loras: Vec<u16>,
    /// Waiting requests passed by at least once and not scheduled since (`deferred_waiting`),
    /// which vLLM's waiting-requests metric leaves out; flags by id and their count.
    deferred: Vec<bool>,
    num_deferred: usize,
}

impl VllmV1 {
    /// The rule under `cfg`'s limits.
    pub fn new(cfg: EngineConfig) -> Self {
        let (offload, lmcache) = match cfg.offload {
            Some(o) if o.backend == OffloadBackend::Lmcache => (None, Some(Lmcache::new(o))),
            o => (o.map(Connector::new), None),
        };
        Self {
            cfg,
            offload,
            lmcache,
            skipped: Vec::new(),
            skipped_holding: Vec::new(),
            lora: cfg.lora.map(|l| (Resident::new(l), Scheduled::default())),
            batch_loras: Vec::new(),
            deferred: Vec::new(),
            num_deferred: 0,
        }
    }

    /// Passes waiting request `id` by in this step (`skip_request`): it goes back to the head
    /// of the waiting queue when the step is formed.
    fn skip(&mut self, id: ReqId) {
        self.skipped.push(id);
        self.defer(id);
    }

    /// [`Self::skip`] for a request holding KV blocks.
    fn skip_holding(&mut self, id: ReqId) {
        self.skipped_holding.push(id);
        self.defer(id);
    }

    fn defer(&mut self, id: ReqId) {
        let i = id as usize;
        if self.deferred.len() <= i {
            self.deferred.resize(i + 1, false);
        }
        if !self.deferred[i] {
            self.deferred[i] = true;
            self.num_deferred += 1;
        }
    }

    /// Request `id` was scheduled or left: no longer deferred.
    fn undefer(&mut self, id: ReqId) {
        if let Some(d) = self.deferred.get_mut(id as usize).filter(|d| **d) {
            *d = false;
            self.num_deferred -= 1;
        }
    }

    /// The tokens waiting request `r` must find room for to be admitted: all its known tokens
    /// under whole-sequence admission, its prompt and every output under TensorRT-LLM's, none
    /// otherwise.
    fn reserve(&self, r: &super::ReqRt) -> usize {
        if self.cfg.rules.trtllm_reserve_to_completion {
            (r.prompt_len + r.output_len) as usize
        } else if self.cfg.rules.vllm_reserve_full_isl {
            r.num_tokens as usize
        } else {
            0
        }
    }

    /// Phase B's turn for the next waiting request under CPU offloading (vLLM 0.33
    /// `Scheduler.schedule`): the requests holding KV blocks first (`kv_holding_waiting`: loading,
    /// or loaded and not yet scheduled), then the waiting queue. `Some(true)` when it was handled
    /// (scheduled from its loaded tokens, passed by, or admitted to load), `Some(false)` when the
    /// waiting head should be scheduled as usual, `None` when admission stops.
    fn offload_turn(&mut self, q: &mut VllmQueues, s: &mut Step, threshold: u32, budget: &mut u32) -> Option<bool> {
        if self.lmcache.is_some() {
            return self.lmcache_turn(q, s, threshold, budget);
        }
        let Some(c) = self.offload.as_mut() else { return Some(false) };
        if let Some(&id) = q.holding.front() {
            if c.waiting(id) == Waiting::Loading {
                q.holding.pop_front();
                self.skip_holding(id);
                return Some(true);
            }
            if c.waiting(id) == Waiting::Landed {
                let r = s.reqs[id as usize];
                let (computed, cached) = c.land(id, &r, s.cache);
                let r = &mut s.reqs[id as usize];
                r.num_computed = computed;
                if !r.admitted {
                    r.admitted = true;
                    r.cached_prompt_tokens = cached;
                }
            }
            // Scheduled from what it holds (`num_computed_tokens > 0`: no lookup).
            let r = s.reqs[id as usize];
            let left = r.num_tokens - r.num_computed;
            if !self.cfg.enable_chunked_prefill && Self::cap(threshold, left) > *budget {
                return None;
            }
            let n = Self::cap(threshold, left).min(*budget);
            if !s.cache.grow_reserving(id, (r.num_computed + n) as usize, self.reserve(&r)) {
                return None;
            }
            let r = &mut s.reqs[id as usize];
            if r.first_scheduled_s.is_nan() {
                r.first_scheduled_s = s.now;
            }
            q.holding.pop_front();
            q.running.push(id);
            self.undefer(id);
            s.out.push(id, &s.reqs[id as usize], n);
            *budget -= n;
            return Some(true);
        }
        let id = q.waiting_head()?;
        let r = s.reqs[id as usize];
        let known = r.num_tokens as usize;
        let gpu_hit = s.cache.peek(r.seq, known);
        match c.lookup(id, &r, gpu_hit, s.cache) {
            Lookup::Load(0) => Some(false),
            Lookup::Defer => {
                q.pop_waiting();
                self.skip(id);
                Some(true)
            }
            Lookup::Load(ext) => {
                let a = s.cache.admit_external(id, r.seq, known, ext, self.reserve(&r))?;
                debug_assert_eq!(a.hit_tokens, gpu_hit, "the cache's hit moved under the lookup");
                let c = self.offload.as_mut().expect("checked");
                c.start_load(id, &r, gpu_hit, ext, s.cache);
                q.pop_waiting();
                // It holds blocks now: it waits among those that do.
                self.skip_holding(id);
                Some(true)
            }
        }
    }

    /// Phase B's turn for the waiting head under LMCache (vLLM 0.22 `Scheduler.schedule` with
    /// `LMCacheConnectorV1`): looked up past its GPU hit, it is admitted with the hit loaded
    /// synchronously — counted computed at once, its blocks allocated and registered with the
    /// step's chunk — and scheduled in this step. `Some(false)`: no load, schedule it as usual.
    fn lmcache_turn(&mut self, q: &mut VllmQueues, s: &mut Step, threshold: u32, budget: &mut u32) -> Option<bool> {
        let lm = self.lmcache.as_mut().expect("checked");
        let id = q.waiting_head()?;
        let r = s.reqs[id as usize];
        let known = r.num_tokens as usize;
        // No chunk held: nothing to load, whatever the GPU holds (its walk is skipped).
        let hit = lm.lookup(id, &r, s.cache, s.now);
        // The remote server's round trips block the scheduler before the step's forward.
        s.out.load_s += lm.take_wait();
        if hit == 0 {
            return Some(false);
        }
        let gpu_hit = s.cache.peek(r.seq, known);
        let ext = Lmcache::need(hit, gpu_hit, r.num_tokens);
        if ext == 0 {
            return Some(false);
        }
        let computed = gpu_hit + ext;
        let left = (known - computed) as u32;
        if !self.cfg.enable_chunked_prefill && Self::cap(threshold, left) > *budget {
            return None;
        }
        let n = Self::cap(threshold, left).min(*budget);
        let a = s.cache.admit_external(id, r.seq, known, ext + n as usize, self.reserve(&r))?;
        debug_assert_eq!(a.hit_tokens, gpu_hit, "the cache's hit moved under the lookup");
        s.cache.loaded(id, computed + n as usize);
        let lm = self.lmcache.as_mut().expect("checked");
        s.out.load_s += lm.admitted(id, gpu_hit, ext, s.now);
        s.reqs[id as usize].admitted_with(computed, s.now);
        q.pop_waiting();
        q.running.push(id);
        self.undefer(id);
        s.out.push(id, &s.reqs[id as usize], n);
        *budget -= n;
        Some(true)
    }

    /// Phase A under the priority policy (vLLM 0.33 `Scheduler.schedule`): a running request
    /// that cannot grow preempts the running request of the greatest (priority, arrival),
    /// wherever it stands in `running`. A victim scheduled earlier in this step gives its tokens
    /// back to the budget; a request that preempted itself is passed over and the requests after
    /// it, of higher priority, may still fit. Returns the budget left.
    fn running_by_priority(q: &mut VllmQueues, s: &mut Step, threshold: u32, mut budget: u32) -> u32 {
        let mut i = 0;
        'running: while i < q.running.len() && budget > 0 {
            let id = q.running[i];
            let n = Self::chunk(s, id, threshold, budget);
            if n == 0 {
                i += 1;
                continue;
            }
            let total = (s.reqs[id as usize].num_computed + n) as usize;
            while !s.cache.grow(id, total) {
                let v = q.priority_victim().expect("the request itself is running");
                if v < i {
                    i -= 1;
                }
                let victim = q.running[v];
                if let Some(given_back) = s.out.take_back(victim, s.reqs) {
                    budget += given_back;
                }
                q.preempt_at(v, s);
                if victim == id {
                    continue 'running;
                }
            }
            s.out.push(id, &s.reqs[id as usize], n);
            budget -= n;
            i += 1;
        }
        budget
    }

    /// The tokens running request `id` computes next: what it has not computed, capped by
    /// `threshold` and the budget left, then ended where its cache needs the chunk to end (the
    /// Mamba split, `_mamba_block_aligned_split`; 0: it waits this step).
    fn chunk(s: &Step, id: ReqId, threshold: u32, budget: u32) -> u32 {
        let r = &s.reqs[id as usize];
        let n = Self::cap(threshold, r.num_tokens - r.num_computed).min(budget);
        s.cache.align_chunk(id, r.num_tokens as usize, n as usize) as u32
    }

    /// Caps a chunk of `n` tokens by `threshold` (0: no cap).
    fn cap(threshold: u32, n: u32) -> u32 {
        if threshold > 0 && n > threshold {
            threshold
        } else {
            n
        }
    }
}

impl VllmRule for VllmV1 {
    /// After a step of decodes alone, phase B ran with the budget they left: it admits nothing
    /// while nobody waits, `max_num_seqs` are running or no budget is left; otherwise it stopped
    /// at the waiting head, refused by the cache (with chunked prefill; without it the head's
    /// whole prompt is checked against the budget first, and this does not say).
    fn admission(&self, q: &VllmQueues, decodes: u32) -> Admission {
        let budget = self.cfg.max_num_batched_tokens.saturating_sub(decodes);
        let full = budget == 0 || q.running.len() >= self.cfg.max_num_seqs as usize;
        // vLLM's own tier: a request whose store was refused offers again at its next step, and
        // unless the batch is full phase B checks a holding request's load (it may have landed)
        // and looks the waiting head up at every step. With no copy in flight no chunk is being
        // stored or loaded, so the lookup cannot defer and gives the same answer until a step
        // stores again; the head is then refused or admitted by its blocks as without the tier.
        if let Some(c) = &self.offload {
            let head_looked_up = q.waiting_head().is_some() && !c.no_copies_in_flight();
            if !c.offers_nothing() || (!full && (!q.holding.is_empty() || head_looked_up)) {
                return Admission::Open;
            }
        }
        match q.waiting_head() {
            None => Admission::Closed,
            Some(_) if full => Admission::Closed,
            // The LoRA rule may pass the head by and admit a later request.
            Some(_) if self.lora.is_some() => Admission::Open,
            Some(head) if self.cfg.enable_chunked_prefill && !self.cfg.rules.trtllm_reserve_to_completion => {
                Admission::Refused(head)
            }
            // TensorRT-LLM's GUARANTEED_NO_EVICT: running requests took their blocks to completion
            // at admission, so decode steps allocate nothing and the room a waiting request is
            // checked against changes only when one finishes; the step budget and the running
            // count stay as they are while the same decodes run.
            Some(head) if self.cfg.rules.trtllm_reserve_to_completion => Admission::Refused(head),
            Some(_) => Admission::Open,
        }
    }

    fn schedule(&mut self, q: &mut VllmQueues, s: &mut Step) {
        if let Some(c) = self.offload.as_mut() {
            c.begin(s.now);
        }
        self.form(q, s);
        // The requests passed by go back to the heads of their queues, in their order.
        if !self.skipped.is_empty() || !self.skipped_holding.is_empty() {
            q.prepend_holding(&self.skipped_holding);
            q.prepend(&self.skipped);
            self.skipped.clear();
            self.skipped_holding.clear();
        }
        if let Some((resident, _)) = self.lora.as_mut() {
            // `_set_active_loras`: the batch's adapters made resident before its forward.
            self.batch_loras.clear();
            for &(id, _) in &s.out.items {
                let l = s.reqs[id as usize].lora;
                if l != 0 && !self.batch_loras.contains(&l) {
                    self.batch_loras.push(l);
                }
            }
            s.out.shape.lora_adapters = self.batch_loras.len() as u32;
            s.out.load_s += resident.apply(&self.batch_loras);
        }
        if let Some(lm) = self.lmcache.as_mut() {
            // `wait_for_save`: the batch's new full prompt chunks, saved after the forward.
            s.out.load_s += lm.save(&s.out.items, s.reqs, s.cache, s.now);
        }
        if let Some(c) = self.offload.as_mut() {
            // `build_connector_meta`: this step's stores, and the flushes its preemptions need.
            if let Some(t) = c.plan_stores(&s.out.items, s.reqs, s.cache) {
                s.out.wait_until = t;
            }
        }
    }

    fn finished(&mut self, id: ReqId) {
        self.undefer(id);
        if let Some(lm) = self.lmcache.as_mut() {
            lm.finished(id);
        }
        if let Some(c) = self.offload.as_mut() {
            c.finished(id);
        }
    }

    fn priced(&mut self, now: f64, end: Option<f64>) {
        if let Some(c) = self.offload.as_mut() {
            c.priced(now, end);
        }
        if let Some(lm) = self.lmcache.as_mut() {
            lm.priced(now, end);
        }
    }

    fn next_copy_end(&self) -> Option<f64> {
        self.offload.as_ref().and_then(Connector::next_copy_end)
    }

    fn coalesced(&mut self, steps: u32) {
        if let Some(c) = self.offload.as_mut() {
            c.skip_steps(steps);
        }
    }

    fn lmcache_server_swap(&mut self, server: &mut super::vllm_offload::lmcache::remote::LmServer) -> bool {
        self.lmcache.as_mut().is_some_and(|lm| lm.server_swap(server))
    }

    fn offload_stats(&self) -> Option<OffloadStats> {
        match &self.lmcache {
            Some(lm) => Some(lm.stats()),
            None => self.offload.as_ref().map(Connector::stats),
        }
    }

    fn lora_stats(&self) -> Option<LoraStats> {
        self.lora.as_ref().map(|(r, _)| r.stats())
    }

    fn max_loras(&self) -> u32 {
        self.cfg.lora.map_or(0, |l| l.max_loras)
    }

    fn deferred(&self) -> usize {
        self.num_deferred
    }
}

impl VllmV1 {
    /// Forms the step (phases A and B) into `s.out`.
    fn form(&mut self, q: &mut VllmQueues, s: &mut Step) {
        // `KVCacheManager.new_step_starts`.
        s.cache.settle();
        let mut budget = self.cfg.max_num_batched_tokens;
        let rules = self.cfg.rules;
        // vLLM 0.33 `Scheduler.schedule`: with one request present (running + waiting, counted
        // as the step begins) nobody can be starved, so no chunk is capped.
        let alone = rules.vllm_long_prefill_uncapped_alone && q.running.len() + q.waiting_len() <= 1;
        let threshold = if alone { 0 } else { self.cfg.long_prefill_token_threshold };
        // Phase A: running requests, in list order.
        if self.cfg.scheduling_policy == SchedulingPolicy::Priority {
            budget = Self::running_by_priority(q, s, threshold, budget);
        } else {
            let mut i = 0;
            while i < q.running.len() && budget > 0 {
                let id = q.running[i];
                let n = Self::chunk(s, id, threshold, budget);
                if n == 0 {
                    i += 1;
                    continue;
                }
                if !q.schedule_running(id, n, s) {
                    break;
                }
                budget -= n;
                i += 1;
            }
        }
        // Phase B: waiting requests, only if nothing was preempted.
        if s.out.preempted > 0 {
            return;
        }
        // The adapters of every running request, scheduled in this step or not.
        if let Some((_, held)) = self.lora.as_mut() {
            held.reset(q.running.iter().map(|&id| s.reqs[id as usize].lora));
        }
        while budget > 0 && q.running.len() < self.cfg.max_num_seqs as usize {
            match self.offload_turn(q, s, threshold, &mut budget) {
                None => break,
                Some(true) => continue,
                Some(false) => {}
            }
            let Some(id) = q.waiting_head() else { break };
            let r = s.reqs[id as usize];
            if let (Some((_, held)), Some(l)) = (self.lora.as_ref(), self.cfg.lora) {
                if held.blocks(r.lora, l.max_loras) {
                    // Scheduling would exceed max_loras: passed by, keeping its place.
                    q.pop_waiting();
                    self.skip(id);
                    continue;
                }
            }
            let known = r.num_tokens as usize;
            if !self.cfg.enable_chunked_prefill {
                let hit = s.cache.peek(r.seq, known);
                if Self::cap(threshold, (known - hit) as u32) > budget {
                    break;
                }
            }
            let max_new = budget.min(Self::cap(threshold, u32::MAX));
            // Whole-sequence admission reserves blocks for every known token (resumed requests'
            // outputs included); refused, the request stays at the queue head, blocking it.
            // TensorRT-LLM's GUARANTEED_NO_EVICT reserves the prompt and every output to come.
            let to_completion = (r.prompt_len + r.output_len) as usize;
            let reserve = self.reserve(&r);
            let Some(a) = s.cache.admit_reserving(id, r.seq, known, max_new as usize, reserve) else { break };
            if rules.trtllm_reserve_to_completion {
                // The reservation is taken now, so what running requests will still need is never
                // handed out (`NoEvictScheduledBlocksManager`): growth cannot fail, nothing is preempted.
                let grown = s.cache.grow(id, to_completion);
                debug_assert!(grown, "a request admitted to completion could not take its reservation");
            }
            let n = (a.allocated_tokens - a.hit_tokens) as u32;
            s.reqs[id as usize].admitted_with(a.hit_tokens, s.now);
            if let Some(lm) = self.lmcache.as_mut() {
                // `update_state_after_alloc`: its kept lookup is cleared.
                lm.admitted(id, a.hit_tokens, 0, s.now);
            }
            q.pop_waiting();
            q.running.push(id);
            self.undefer(id);
            s.out.push(id, &s.reqs[id as usize], n);
            budget -= n;
            if let Some((_, held)) = self.lora.as_mut() {
                held.admit(r.lora);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{NoCache, PrefixCache};
    use crate::engine::{Batch, ReqRt};

    /// Queues under `policy` whose `running` holds `reqs` (id, priority) in that order, each
    /// with 10 tokens computed and one sampled (a decode of one token next), in a pool of
    /// `capacity` token slots.
    fn decoding(policy: SchedulingPolicy, reqs: &[(u32, i32)], capacity: u64) -> (VllmQueues, Vec<ReqRt>, NoCache) {
        let mut q = VllmQueues::new(policy);
        let mut rt = Vec::new();
        let mut cache = NoCache::new(Some(capacity));
        for &(id, p) in reqs {
            q.arrive(id, p, 0.0);
            let mut r = ReqRt { priority: Some(p), ..ReqRt::new(id, 10, 5) };
            cache.admit(id, id, 10, usize::MAX).unwrap();
            r.admitted_with(0, 0.0);
            r.num_computed = 10;
            r.num_tokens = 11;
            r.generated = 1;
            rt.push(r);
        }
        while q.pop_waiting().is_some() {}
        q.running = reqs.iter().map(|&(id, _)| id).collect();
        (q, rt, cache)
    }

    fn step(policy: SchedulingPolicy, reqs: &[(u32, i32)], capacity: u64) -> (VllmQueues, Batch) {
        let (mut q, mut rt, mut cache) = decoding(policy, reqs, capacity);
        let cfg = EngineConfig { scheduling_policy: policy, ..EngineConfig::new(EngineVersion::Vllm033) };
        let mut out = Batch::default();
        out.clear();
        VllmV1::new(cfg).schedule(&mut q, &mut Step { now: 1.0, reqs: &mut rt, cache: &mut cache, out: &mut out });
        (q, out)
    }

    /// The lowest-priority request cannot grow and is its own victim: it is passed over and the
    /// higher-priority request behind it runs (FCFS would preempt that one, the last).
    #[test]
    fn a_low_priority_request_preempts_itself_and_the_next_runs() {
        let (q, out) = step(SchedulingPolicy::Priority, &[(0, 5), (1, 0)], 20);
        assert_eq!((out.items.clone(), out.preempted), (vec![(1, 1)], 1));
        assert_eq!((q.running.clone(), q.waiting_head()), (vec![1], Some(0)));
        let (q, out) = step(SchedulingPolicy::Fcfs, &[(0, 5), (1, 0)], 20);
        assert_eq!((out.items.clone(), out.preempted), (vec![(0, 1)], 1));
        assert_eq!((q.running.clone(), q.waiting_head()), (vec![0], Some(1)));
    }

    /// The victim was scheduled earlier in the step: its token goes back to the budget and out of
    /// the batch, its blocks free, and the request that needed them runs.
    #[test]
    fn a_victim_scheduled_earlier_in_the_step_is_taken_back() {
        let (q, out) = step(SchedulingPolicy::Priority, &[(0, 5), (1, 0)], 21);
        assert_eq!((out.items.clone(), out.preempted), (vec![(1, 1)], 1));
        assert_eq!((out.shape.seqs, out.shape.decode_seqs, out.shape.decode_ctx_tokens), (1, 1, 10));
        assert_eq!(q.running, vec![1]);
        // Equal priorities: the later arrival (the greater id of one burst) is the victim.
        let (q, out) = step(SchedulingPolicy::Priority, &[(1, 0), (0, 0)], 21);
        assert_eq!((out.items.clone(), q.running.clone()), (vec![(0, 1)], vec![0]));
    }

    #[test]
    fn the_priority_queue_orders_by_priority_then_arrival_then_id() {
        let mut q = VllmQueues::new(SchedulingPolicy::Priority);
        for (id, p, t) in [(0, 1, 0.0), (1, 0, 2.0), (2, 0, 1.0), (3, -3, 5.0), (5, 0, 1.0), (4, 0, 1.0)] {
            q.arrive(id, p, t);
        }
        assert_eq!(q.waiting_len(), 6);
        let order: Vec<u32> = std::iter::from_fn(|| q.pop_waiting()).collect();
        assert_eq!(order, vec![3, 2, 4, 5, 1, 0]);
    }

    /// `kv_holding_waiting` is a queue of the policy: requests passed by while holding KV blocks
    /// go back before the others in their order under FCFS, at their places by (priority,
    /// arrival) under the priority policy — a later-held request of higher priority first.
    #[test]
    fn requests_holding_kv_blocks_queue_by_the_policy() {
        for (policy, want) in
            [(SchedulingPolicy::Fcfs, vec![2, 3, 0, 1]), (SchedulingPolicy::Priority, vec![3, 0, 2, 1])]
        {
            let mut q = VllmQueues::new(policy);
            for (id, p, t) in [(0, 1, 0.0), (1, 4, 1.0), (2, 2, 2.0), (3, 0, 3.0)] {
                q.arrive(id, p, t);
            }
            while q.pop_waiting().is_some() {}
            q.prepend_holding(&[0, 1]);
            q.prepend_holding(&[2, 3]);
            assert_eq!(q.holding.iter().copied().collect::<Vec<_>>(), want, "{policy:?}");
        }
    }
}
