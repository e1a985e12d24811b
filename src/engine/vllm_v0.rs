//! vLLM's legacy V0 scheduler, default mode without chunked prefill (ENGINE_SPEC §2.3): when
//! nothing is swapped, whole prompts are admitted first, FCFS, while they fit the token budget
//! (uncached tokens only), `max_num_seqs` and the block watermark (1% of the pool must stay
//! free); a step that admitted any prefill runs no decode. Otherwise every running request
//! decodes one token; one that cannot get a slot preempts the last running request (recompute,
//! to the front of the waiting queue). The cache under it is the configured one (vLLM v1's
//! paged cache by default, not V0's de-duplicating LRU evictor).

use super::{grow_or_preempt_last, Batch, EngineConfig, ReqRt, Scheduler, VllmQueues};
use crate::cache::{PrefixCache, ReqId};

/// `block_manager` watermark: the share of the pool admission keeps free.
const WATERMARK: f64 = 0.01;

/// The V0 scheduler's queues.
pub struct VllmV0 {
    cfg: EngineConfig,
    q: VllmQueues,
}

impl VllmV0 {
    /// An idle scheduler.
    pub fn new(cfg: EngineConfig) -> Self {
        Self { cfg, q: VllmQueues::default() }
    }

    fn prefills(&mut self, now: f64, reqs: &mut [ReqRt], cache: &mut dyn PrefixCache, out: &mut Batch) {
        let mut budget = self.cfg.max_num_batched_tokens as usize;
        while let Some(&id) = self.q.waiting.front() {
            if self.q.running.len() >= self.cfg.max_num_seqs as usize {
                break;
            }
            let r = reqs[id as usize];
            let known = r.num_tokens as usize;
            let hit = cache.peek(r.seq, known);
            let new = known - hit;
            if new > budget {
                break;
            }
            let u = cache.usage();
            if let Some(cap) = u.capacity_tokens {
                let free = cap - u.used_tokens + u.evictable_tokens;
                if (free as f64) - (new as f64) < cap as f64 * WATERMARK {
                    break;
                }
            }
            let Some(a) = cache.admit(id, r.seq, known, usize::MAX) else { break };
            reqs[id as usize].admitted_with(a.hit_tokens, now);
            self.q.waiting.pop_front();
            self.q.running.push(id);
            let r = reqs[id as usize];
            out.push(id, &r, (a.allocated_tokens - a.hit_tokens) as u32);
            budget -= a.allocated_tokens - a.hit_tokens;
        }
    }
}

impl Scheduler for VllmV0 {
    fn enqueue(&mut self, id: ReqId) {
        self.q.waiting.push_back(id);
    }

    fn schedule(&mut self, now: f64, reqs: &mut [ReqRt], cache: &mut dyn PrefixCache, out: &mut Batch) {
        out.clear();
        self.prefills(now, reqs, cache, out);
        if !out.items.is_empty() {
            return; // prefill steps run no decode
        }
        let mut i = 0;
        while i < self.q.running.len() {
            let id = self.q.running[i];
            let r = reqs[id as usize];
            let total = r.num_computed as usize + 1;
            if !grow_or_preempt_last(id, total, &mut self.q.running, &mut self.q.waiting, reqs, cache, out) {
                break;
            }
            out.push(id, &r, 1);
            i += 1;
        }
    }

    fn finished(&mut self, id: ReqId) {
        self.q.finished(id);
    }

    fn queued(&self) -> (usize, usize) {
        self.q.queued()
    }

    fn reject_head(&mut self) -> Option<ReqId> {
        self.q.waiting.pop_front()
    }
}
