//! vLLM's legacy V0 scheduler (ENGINE_SPEC §2.3). Default mode, without chunked prefill: when
//! nothing is swapped, whole prompts are admitted first, FCFS, while they fit the token budget
//! (uncached tokens only), `max_num_seqs` and the block watermark (1% of the pool must stay
//! free); a step that admitted any prefill runs no decode. Otherwise every running request
//! decodes one token; one that cannot get a slot preempts the last running request (recompute,
//! to the front of the waiting queue). Chunked mode (`--enable-chunked-prefill`): one token
//! budget per step, running requests first in queue order (decodes one token, unfinished
//! prefills a chunk, preempting the last running request when a slot is missing), then new
//! prompts, FCFS, each chunked to what is left of the budget (admission reserves the whole
//! prompt's blocks, under the watermark) — new prompts are admitted even in a step that
//! preempted, the victims rejoining the waiting queue after it; then `running` is reordered:
//! requests left unscheduled, decodes, prefills finishing in this step, other prefills, new
//! prefills. The cache under it is the configured one (vLLM v1's paged cache by default, not
//! V0's de-duplicating LRU evictor). Multi-step (`--num-scheduler-steps N`, default mode only,
//! as vLLM 0.6.0 refuses it with chunked prefill): a decode batch reserves N slots per request
//! and runs N forward steps before the scheduler runs again; a prefill batch runs one
//! (docs/engines/multistep.md).

use super::launch::EngineFlags;
use super::EngineKind;
use super::{EngineConfig, Step, VllmQueues, VllmRule};
use crate::cache::ReqId;
use crate::cost::spec::SpecAlgorithm;
use crate::error::{Error, Result};

/// `--num-scheduler-steps`, checked as vLLM 0.6.0 checks it (`EngineArgs.create_engine_config`:
/// no chunked prefill, no speculative decoding; `SchedulerConfig._verify_args`: at least 1). The
/// flag is vLLM V0's: the engine-flag table ([`super::flags`]) refuses it for the others before.
pub fn scheduler_steps(engine: EngineKind, flags: &EngineFlags) -> Result<u32> {
    const FLAG: &str = "--num-scheduler-steps";
    let Some(n) = flags.num_scheduler_steps else { return Ok(1) };
    debug_assert_eq!(engine, EngineKind::VllmV0, "{FLAG}: refused for other engines by the flag table");
    if n == 0 {
        return Err(Error::invalid(FLAG, "must be at least 1"));
    }
    if n > 1 && flags.enable_chunked_prefill == Some(true) {
        return Err(Error::invalid(FLAG, "chunked prefill is not supported with multi-step (vLLM 0.6.0 refuses both)"));
    }
    if n > 1 && flags.speculative != SpecAlgorithm::None {
        return Err(Error::invalid(
            FLAG,
            "speculative decoding is not supported with multi-step (vLLM 0.6.0 refuses both)",
        ));
    }
    Ok(n)
}

/// Whether vLLM V0's async output processing is on, as the vllm-v0@0.9 bundle decides it
/// (vLLM 0.9 `vllm/config.py` `ModelConfig.verify_async_output_proc`, with
/// `CudaPlatform.is_async_output_supported` in `vllm/platforms/cuda.py`; vLLM 0.6.0's
/// `verify_async_output_proc` has the same rules): on by default (`use_async_output_proc`
/// True), off with `--disable-async-output-proc`, under pipeline parallelism, with
/// `--enforce-eager` (no CUDA graph), or with speculative decoding. The flags are vLLM V0's: the
/// engine-flag table ([`super::flags`]) refuses them for the others before (vLLM v1 dropped the
/// V0 output processor; cachesim does not model `--enforce-eager` otherwise).
pub fn async_output_proc(engine: EngineKind, flags: &EngineFlags) -> Result<bool> {
    if engine != EngineKind::VllmV0 {
        debug_assert!(!flags.disable_async_output_proc && !flags.enforce_eager, "refused by the flag table");
        return Ok(false);
    }
    Ok(!flags.disable_async_output_proc
        && !flags.enforce_eager
        && flags.pp <= 1
        && flags.speculative == SpecAlgorithm::None)
}

/// vLLM V0's virtual engines under pipeline parallelism (`LLMEngine.__init__`: one `Scheduler`
/// per stage, each over `num_gpu_blocks // pipeline_parallel_size` blocks; the instance runs
/// them, `crate::sim` `virtual_engines`): `pp` for V0, 1 for the other engines (vLLM v1 keeps one
/// scheduler and a batch queue instead). Refused where cachesim does not model them together:
/// multi-step scheduling and prefill/decode disaggregation.
pub fn virtual_engines(
    engine: EngineKind,
    flags: &EngineFlags,
    scheduler_steps: u32,
    disaggregated: bool,
) -> Result<u32> {
    if engine != EngineKind::VllmV0 || flags.pp <= 1 {
        return Ok(1);
    }
    if scheduler_steps > 1 {
        return Err(Error::invalid(
            "--num-scheduler-steps",
            "multi-step scheduling with pipeline parallelism (V0's virtual engines) is not modelled",
        ));
    }
    if disaggregated {
        return Err(Error::invalid(
            "--pipeline-parallel-size",
            "vLLM V0 under pipeline parallelism (virtual engines) is not modelled in a disaggregated deployment",
        ));
    }
    Ok(flags.pp.min(u32::MAX as u64) as u32)
}

/// `block_manager` watermark: the share of the pool admission keeps free.
const WATERMARK: f64 = 0.01;

/// The V0 rule.
pub struct VllmV0 {
    cfg: EngineConfig,
}

impl VllmV0 {
    /// The rule under `cfg`'s limits.
    pub fn new(cfg: EngineConfig) -> Self {
        Self { cfg }
    }

    /// Admits waiting prompts FCFS, passing over the requests preempted in this step (at the
    /// front of the queue: they rejoin it only after the step), under the token budget,
    /// `max_num_seqs` and the watermark; whole prompts only, or (chunked mode) the first chunk
    /// that fits the budget. Each admission reserves the whole prompt's blocks. Returns the
    /// admitted requests.
    fn prefills(&self, q: &mut VllmQueues, s: &mut Step, mut budget: usize) -> Vec<ReqId> {
        let skip = s.out.preempted as usize;
        let chunking = self.cfg.enable_chunked_prefill;
        let mut admitted = Vec::new();
        while let Some(&id) = q.waiting.get(skip) {
            if budget == 0 || q.running.len() >= self.cfg.max_num_seqs as usize {
                break;
            }
            let r = s.reqs[id as usize];
            let known = r.num_tokens as usize;
            let hit = s.cache.peek(r.seq, known);
            let new = known - hit;
            if new > budget && !chunking {
                break;
            }
            let u = s.cache.usage();
            if let Some(cap) = u.capacity_tokens {
                let free = cap - u.used_tokens + u.evictable_tokens;
                if (free as f64) - (new as f64) < cap as f64 * WATERMARK {
                    break;
                }
            }
            let Some(a) = s.cache.admit(id, r.seq, known, usize::MAX) else { break };
            s.reqs[id as usize].admitted_with(a.hit_tokens, s.now);
            q.waiting.remove(skip);
            q.running.push(id);
            let n = (a.allocated_tokens - a.hit_tokens).min(budget);
            s.out.push(id, &s.reqs[id as usize], n as u32);
            budget -= n;
            admitted.push(id);
        }
        admitted
    }

    fn schedule_default(&self, q: &mut VllmQueues, s: &mut Step) {
        let budget = self.cfg.max_num_batched_tokens as usize;
        self.prefills(q, s, budget);
        if !s.out.items.is_empty() {
            return; // prefill steps run no decode
        }
        // Multi-step: a decode batch runs `num_scheduler_steps` steps, each decode reserving
        // that many slots (`_get_num_lookahead_slots(is_prefill=False)` = steps − 1 beyond the
        // new token); a prefill batch above ran one (`_schedule_prefills`: lookahead 0).
        let steps = self.cfg.num_scheduler_steps.max(1);
        let mut i = 0;
        while i < q.running.len() {
            let id = q.running[i];
            if !q.schedule_running_ahead(id, 1, steps - 1, s) {
                break;
            }
            i += 1;
        }
        if !s.out.items.is_empty() {
            s.out.steps = steps;
        }
    }

    fn schedule_chunked(&self, q: &mut VllmQueues, s: &mut Step) {
        let mut budget = self.cfg.max_num_batched_tokens;
        // Running requests in queue order: decodes, and unfinished prefills by a chunk.
        let (mut decodes, mut finishing, mut partial) = (Vec::new(), Vec::new(), Vec::new());
        let mut i = 0;
        while i < q.running.len() {
            let id = q.running[i];
            let r = s.reqs[id as usize];
            let remaining = r.num_tokens - r.num_computed;
            let n = remaining.min(budget);
            if n == 0 {
                break;
            }
            if !q.schedule_running(id, n, s) {
                break;
            }
            budget -= n;
            match (remaining == 1 && r.generated > 0, n == remaining) {
                (true, _) => decodes.push(id),
                (false, true) => finishing.push(id),
                (false, false) => partial.push(id),
            }
            i += 1;
        }
        // Requests left unscheduled (the budget ran out) go first; admitting needs budget, so
        // nobody is admitted past them.
        let rest: Vec<ReqId> = q.running[i..].to_vec();
        let new = self.prefills(q, s, budget as usize);
        q.running = [rest, decodes, finishing, partial, new].concat();
    }
}

impl VllmRule for VllmV0 {
    fn schedule(&mut self, q: &mut VllmQueues, s: &mut Step) {
        if self.cfg.enable_chunked_prefill {
            self.schedule_chunked(q, s);
        } else {
            self.schedule_default(q, s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{NoCache, PrefixCache};
    use crate::engine::EngineKind;
    use crate::engine::SchedulingPolicy;
    use crate::engine::{Batch, ReqRt, Scheduler, Vllm};

    fn cfg(budget: u32) -> EngineConfig {
        EngineConfig {
            max_num_seqs: 8,
            max_num_batched_tokens: budget,
            max_prefill_tokens: 0,
            ..EngineConfig::new(crate::engine::EngineVersion::newest(EngineKind::VllmV0))
        }
    }

    /// After each chunked step `running` is: unscheduled, decodes, prefills finishing now,
    /// other prefills, new prefills — so the newest prefill is the first preemption victim.
    #[test]
    fn chunked_mode_reorders_running() {
        let mut cache = NoCache::new(None);
        // 0: a long prefill in progress; 1: decoding; 2: a prefill that finishes this step;
        // 3: waiting.
        let mut reqs = vec![ReqRt::new(0, 40, 4), ReqRt::new(1, 4, 4), ReqRt::new(2, 6, 4), ReqRt::new(3, 3, 4)];
        for (id, computed) in [(0u32, 4u32), (1, 4), (2, 2)] {
            cache.admit(id, id, computed as usize, usize::MAX).unwrap();
            reqs[id as usize].admitted_with(0, 0.0);
            reqs[id as usize].num_computed = computed;
        }
        reqs[1].num_tokens = 5;
        reqs[1].generated = 1;
        let mut s = Vllm::new(VllmV0::new(cfg(20)), SchedulingPolicy::Fcfs);
        s.q.running = vec![0, 1, 2];
        s.q.waiting.push_back(3);
        let mut out = Batch::default();
        s.schedule(&mut Step { now: 0.0, reqs: &mut reqs, cache: &mut cache, out: &mut out });
        // Budget 20, queue order: request 0 takes min(36, 20) = 20 and nothing is left.
        assert_eq!(out.items, vec![(0, 20)]);
        assert_eq!(s.q.running, vec![1, 2, 0], "unscheduled first, then the partial prefill");
        let mut s2 = Vllm::new(VllmV0::new(cfg(64)), SchedulingPolicy::Fcfs);
        s2.q.running = vec![0, 1, 2];
        s2.q.waiting.push_back(3);
        reqs[0].num_computed = 4;
        s2.schedule(&mut Step { now: 0.0, reqs: &mut reqs, cache: &mut cache, out: &mut out });
        assert_eq!(out.items, vec![(0, 36), (1, 1), (2, 4), (3, 3)]);
        assert_eq!(s2.q.running, vec![1, 0, 2, 3], "decode, finishing prefills (queue order), new");
    }
}
