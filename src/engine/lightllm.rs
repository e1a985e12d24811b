//! LightLLM's router and step loop (ENGINE_SPEC §4.2–4.3), chunked-prefill backend. Admission
//! estimates the future peak KV footprint: every request (running or candidate) is a pair
//! `a` = tokens held now, `b` = tokens it may still grow (`max_new − out − 1 + 6`, plus the
//! chunking delay); sorted by `b` descending, `need = max_i(b_i · i + Σ_{j≤i} a_j)`; a candidate
//! is admitted iff `need < max_total_tokens`, the request count stays within
//! `running_max_req_size`, and its first chunk fits `batch_max_tokens`; the waiting list is
//! scanned FIFO and stops at the first refusal (the router's ratio 0 makes it always "busy", so
//! the full `max_new_tokens` is assumed). A step runs a decode pass for running requests, then
//! a prefill pass of up to `chunked_prefill_size` tokens per pending request, when there are no
//! decodes, a new batch was admitted, or 6 steps went by without one. Before decoding, while
//! the pool cannot hold one more token per request, the most recently admitted group is paused:
//! its computed KV goes into the radix cache, and it returns to the front of the waiting list.

use super::{EngineConfig, ReqRt, Scheduler, Step};
use crate::cache::{PrefixCache, ReqId};
use crate::cost::BatchShape;
use std::collections::VecDeque;

/// `ADDED_OUTPUT_LEN`.
const ADDED_OUTPUT_LEN: u64 = 6;
/// `router_max_wait_tokens` (+ `dp_prefill_wait_step` 0 + 1 in the chunk delay).
const ROUTER_MAX_WAIT_TOKENS: u64 = 6;

/// LightLLM's queues.
pub struct Lightllm {
    cfg: EngineConfig,
    waiting: VecDeque<ReqId>,
    /// Admitted requests, in admission order, with the group (admission round) of each.
    running: Vec<(ReqId, u64)>,
    next_group: u64,
    /// A batch was admitted and waits for its first prefill pass.
    new_batch: bool,
    steps_without_prefill: u64,
}

impl Lightllm {
    /// An idle router.
    pub fn new(cfg: EngineConfig) -> Self {
        Self {
            cfg,
            waiting: VecDeque::new(),
            running: Vec::new(),
            next_group: 0,
            new_batch: false,
            steps_without_prefill: 0,
        }
    }

    fn chunk(&self) -> u64 {
        if self.cfg.chunked_prefill_size == 0 {
            u64::MAX
        } else {
            self.cfg.chunked_prefill_size as u64
        }
    }

    /// The (a, b) pair of a request.
    fn footprint(&self, r: &ReqRt) -> (u64, u64) {
        let a = r.num_tokens as u64 + 1;
        let remaining_prefill = (r.num_tokens - r.num_computed) as u64;
        let delay = if remaining_prefill > 0 && self.chunk() != u64::MAX {
            remaining_prefill.div_ceil(self.chunk()) * (ROUTER_MAX_WAIT_TOKENS + 1)
        } else {
            0
        };
        let b = (r.output_len as u64).saturating_sub(r.generated as u64 + 1) + ADDED_OUTPUT_LEN + delay;
        (a, b)
    }

    /// Peak-footprint estimate of a set of (a, b) pairs.
    pub fn peak_need(pairs: &mut [(u64, u64)]) -> u64 {
        pairs.sort_by_key(|p| std::cmp::Reverse(p.1));
        let mut cum = 0;
        pairs
            .iter()
            .enumerate()
            .map(|(i, &(a, b))| {
                cum += a;
                b * (i as u64 + 1) + cum
            })
            .max()
            .unwrap_or(0)
    }

    fn admit(&mut self, reqs: &mut [ReqRt], cache: &mut dyn PrefixCache, now: f64) {
        let capacity = cache.usage().capacity_tokens.unwrap_or(u64::MAX);
        let mut pairs: Vec<(u64, u64)> =
            self.running.iter().map(|&(id, _)| self.footprint(&reqs[id as usize])).collect();
        let mut first_step: u64 = self.running.len() as u64; // current decode tokens
        let group = self.next_group;
        let mut admitted = false;
        while let Some(&id) = self.waiting.front() {
            if self.running.len() + 1 > self.cfg.max_num_seqs as usize {
                break;
            }
            let r = reqs[id as usize];
            let first = (r.num_tokens as u64).min(self.chunk());
            if first_step + first > self.cfg.max_num_batched_tokens as u64 {
                break;
            }
            let mut trial = pairs.clone();
            trial.push(self.footprint(&r));
            if Self::peak_need(&mut trial) >= capacity {
                break;
            }
            // Lookup (all known tokens but the last) and pin; the chunks are allocated per pass.
            let Some(a) = cache.admit(id, r.seq, r.num_tokens as usize, 0) else { break };
            reqs[id as usize].admitted_with(a.hit_tokens, now);
            pairs = trial;
            first_step += first;
            self.waiting.pop_front();
            self.running.push((id, group));
            admitted = true;
        }
        if admitted {
            self.next_group += 1;
            self.new_batch = true;
        }
    }

    /// Pauses the latest admitted group while one more token per decoding request does not fit.
    fn pause_for_decode(&mut self, reqs: &mut [ReqRt], cache: &mut dyn PrefixCache) -> u32 {
        let mut paused = 0;
        loop {
            let decoding = self
                .running
                .iter()
                .filter(|&&(id, _)| reqs[id as usize].num_computed == reqs[id as usize].num_tokens - 1)
                .count() as u64;
            let u = cache.usage();
            let free = u.capacity_tokens.map_or(u64::MAX, |c| c - u.used_tokens + u.evictable_tokens);
            if decoding <= free || self.running.len() <= 1 {
                return paused;
            }
            let last_group = self.running.last().expect("running").1;
            let mut group: Vec<ReqId> = Vec::new();
            while self.running.len() > 1 && self.running.last().is_some_and(|&(_, g)| g == last_group) {
                group.push(self.running.pop().expect("checked").0);
            }
            // Back to the front of the waiting list, in their original order.
            for &id in &group {
                cache.preempt(id);
                reqs[id as usize].preempted();
                self.waiting.push_front(id);
                paused += 1;
            }
        }
    }
}

impl Scheduler for Lightllm {
    fn enqueue(&mut self, id: ReqId) {
        self.waiting.push_back(id);
    }

    fn schedule(&mut self, s: &mut Step) {
        let (now, reqs, cache, out) = (s.now, &mut *s.reqs, &mut *s.cache, &mut *s.out);
        out.clear();
        self.admit(reqs, cache, now);
        out.preempted += self.pause_for_decode(reqs, cache);
        // Decode pass.
        let mut decodes = 0;
        for &(id, _) in &self.running {
            let r = reqs[id as usize];
            if r.num_computed + 1 == r.num_tokens && cache.grow(id, r.num_tokens as usize) {
                out.push(id, &r, 1);
                decodes += 1;
            }
        }
        // Prefill pass, as a separate forward.
        let pending: Vec<ReqId> = self
            .running
            .iter()
            .map(|&(id, _)| id)
            .filter(|&id| reqs[id as usize].num_computed + 1 < reqs[id as usize].num_tokens)
            .collect();
        let run_prefill = !pending.is_empty()
            && (decodes == 0 || self.new_batch || self.steps_without_prefill >= ROUTER_MAX_WAIT_TOKENS);
        if !run_prefill {
            self.steps_without_prefill += 1;
            return;
        }
        self.steps_without_prefill = 0;
        self.new_batch = false;
        let mut budget = self.cfg.max_num_batched_tokens as u64;
        let decode_shape = out.shape;
        out.shape = BatchShape::default();
        for id in pending {
            let r = reqs[id as usize];
            let n = ((r.num_tokens - r.num_computed) as u64).min(self.chunk()).min(budget);
            if n == 0 || !cache.grow(id, (r.num_computed as u64 + n) as usize) {
                break;
            }
            out.push(id, &r, n as u32);
            budget -= n;
        }
        out.second_pass = out.shape;
        out.shape = decode_shape;
    }

    fn finished(&mut self, id: ReqId) {
        self.running.retain(|&(x, _)| x != id);
    }

    fn queued(&self) -> (usize, usize) {
        (self.waiting.len(), self.running.len())
    }

    fn reject_head(&mut self) -> Option<ReqId> {
        self.waiting.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_need_by_hand() {
        // Sorted by b: (10, 100), (50, 20), (5, 0) → max(100·1 + 10, 20·2 + 60, 0·3 + 65) = 110.
        assert_eq!(Lightllm::peak_need(&mut [(50, 20), (5, 0), (10, 100)]), 110);
        assert_eq!(Lightllm::peak_need(&mut []), 0);
    }
}
