//! vLLM v1 scheduler (ENGINE_SPEC §2.1). One token budget per step: running requests first,
//! in admission order (decodes and unfinished prefill chunks alike), each taking
//! `min(remaining, budget)` tokens; when KV cannot grow, the *last* running request is
//! preempted (recompute: blocks freed, outputs kept, prepended to waiting) until it fits or
//! the request itself was the victim. Waiting requests are admitted in FCFS order only when
//! nothing was preempted in this step, under `max_num_seqs`, with their prefix-cache hit free
//! of budget; the first that cannot be allocated blocks everyone behind it.

use super::{EngineConfig, Step, VllmQueues, VllmRule};

/// The v1 rule.
pub struct VllmV1 {
    cfg: EngineConfig,
}

impl VllmV1 {
    /// The rule under `cfg`'s limits.
    pub fn new(cfg: EngineConfig) -> Self {
        Self { cfg }
    }

    fn cap(&self, n: u32) -> u32 {
        let t = self.cfg.long_prefill_token_threshold;
        if t > 0 && n > t {
            t
        } else {
            n
        }
    }
}

impl VllmRule for VllmV1 {
    fn schedule(&mut self, q: &mut VllmQueues, s: &mut Step) {
        let mut budget = self.cfg.max_num_batched_tokens;
        // Phase A: running requests, in list order.
        let mut i = 0;
        while i < q.running.len() && budget > 0 {
            let id = q.running[i];
            let r = &s.reqs[id as usize];
            let n = self.cap(r.num_tokens - r.num_computed).min(budget);
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
        // Phase B: waiting requests, only if nothing was preempted.
        if s.out.preempted > 0 {
            return;
        }
        while budget > 0 && q.running.len() < self.cfg.max_num_seqs as usize {
            let Some(&id) = q.waiting.front() else { break };
            let r = s.reqs[id as usize];
            let known = r.num_tokens as usize;
            if !self.cfg.enable_chunked_prefill {
                let hit = s.cache.peek(r.seq, known);
                if (self.cap((known - hit) as u32)) > budget {
                    break;
                }
            }
            let max_new = budget.min(self.cap(u32::MAX));
            let Some(a) = s.cache.admit(id, r.seq, known, max_new as usize) else { break };
            let n = (a.allocated_tokens - a.hit_tokens) as u32;
            s.reqs[id as usize].admitted_with(a.hit_tokens, s.now);
            q.waiting.pop_front();
            q.running.push(id);
            s.out.push(id, &s.reqs[id as usize], n);
            budget -= n;
        }
    }
}
