//! LightLLM's router and step loop (ENGINE_SPEC §4.2–4.3), chunked-prefill backend, as
//! ModelTC/lightllm's main branch has it at fc72ffab (2025-07-11, package version 1.0.1, newer
//! than the v1.0.1 tag; bundle `lightllm@main-2025-07`). Admission
//! (`router/req_queue/chunked_prefill/impl.py`, `_can_add_new_req`) estimates the future peak KV
//! footprint: every request (running or candidate) is a pair `a` = tokens held now, `b` = tokens
//! it may still grow (`max_new − out − 1 + 6`, plus the chunking delay); sorted by `b`
//! descending, `need = max_i(b_i · i + Σ_{j≤i} a_j)`; a candidate is admitted iff `need <
//! max_total_tokens`, the requests running, admitted and paused stay within
//! `running_max_req_size`, and the running requests' decode need plus the new batch's first
//! chunks fit `batch_max_tokens`; the waiting list is scanned FIFO and stops at the first
//! refusal (the router's ratio 0 makes it always "busy", so the full `max_new_tokens` is
//! assumed). A step (`router/manager.py`, `_step`) first pauses, while `_can_decode` fails —
//! the running requests' decode need, one token each or `min(remaining, chunk)` for a pending
//! prefill, exceeds the free and unreferenced tokens — the most recently admitted request
//! (`pause_strategy.py`, `select_paused_reqs`: one `group_req_id`, which in cachesim is one
//! request): its computed KV goes into the radix cache and it returns to the front of the
//! waiting list. Then a decode pass for decoding requests, and a prefill pass giving every
//! pending request `min(remaining, chunk)` tokens (`infer_batch.py`,
//! `get_chuncked_input_token_ids`; no per-pass cap) when there are no decodes, a newly admitted
//! batch waits for its prefill, or 6 steps with pending prefills went by without one
//! (`chuncked_prefill_state.py`, `need_prefill`).

use super::launch::{EngineFlags, Launch, Machine};
use super::{EngineConfig, ReqRt, Scheduler, Step};
use crate::cache::{PrefixCache, ReqId};
use crate::catalog::Gpu;
use crate::error::{Error, Result};
use std::collections::{HashSet, VecDeque};

/// LightLLM's `--max_req_total_len` default (api_cli.py), its model length.
pub const MAX_REQ_TOTAL_LEN: u64 = 16384;

/// LightLLM's launch (api_cli defaults): running_max_req_size 1000, chunked_prefill_size 4096,
/// batch_max_tokens = min(max_req_total_len 16384, 2 × chunk + 256), mem_fraction 0.9; the
/// token pool what the share leaves, or `--max-total-tokens` as given where the GPU memory holds
/// it; the vLLM memory flags and
/// `--enable-chunked-prefill` refused.
pub fn launch(flags: &EngineFlags, m: &Machine) -> Result<Launch> {
    let chunk = match flags.chunked_prefill_size {
        None => 4096,
        Some(c) if c <= 0 => 0,
        Some(c) => c.min(u32::MAX as i64) as u32,
    };
    let batch_max = flags.max_num_batched_tokens.unwrap_or(if chunk == 0 {
        16384
    } else {
        (2 * chunk as u64 + 256).min(16384) as u32
    });
    let frac = flags.mem_fraction_static.unwrap_or(0.9);
    if !(frac > 0.0 && frac <= 1.0) {
        return Err(Error::invalid("--mem-fraction-static", format!("{frac} is not in (0, 1]")));
    }
    let profiled = kv_tokens_per_rank(m.gpu, m.weight_bytes_per_rank(), m.kv_bytes_per_token_per_rank, frac) * m.dp();
    // `MemoryManager.profile_size` (lightllm/common/mem_manager.py) profiles only when
    // `--max_total_token_num` is not given: a given pool is allocated as is, and one the GPU
    // memory cannot hold fails allocating it (CUDA out of memory), refused here.
    let kv = match flags.max_total_tokens {
        None => profiled,
        Some(t) => {
            let most =
                kv_tokens_per_rank(m.gpu, m.weight_bytes_per_rank(), m.kv_bytes_per_token_per_rank, 1.0) * m.dp();
            if t > most {
                return Err(Error::invalid(
                    "--max-total-tokens",
                    format!(
                        "{t} tokens of KV do not fit the GPU memory: {} GiB per GPU less {:.1} GiB of weights holds \
                         {most} tokens at {} bytes a token (LightLLM allocates a given pool as is and would fail \
                         with CUDA out of memory)",
                        m.gpu.memory_gb,
                        m.weight_bytes_per_rank() / (1u64 << 30) as f64,
                        m.kv_bytes_per_token_per_rank
                    ),
                ));
            }
            t
        }
    };
    Ok(Launch {
        max_num_seqs: flags.max_num_seqs.unwrap_or(1000),
        max_num_batched_tokens: batch_max,
        chunked_prefill_size: chunk,
        kv_tokens: kv,
        profiled_kv_tokens: profiled,
        mem_fraction_static: Some(frac),
        vllm_memory: None,
    })
}

/// LightLLM's KV pool of one rank of any layout: `mem_fraction × memory − weights` over the
/// rank's KV bytes per token, from the datasheet memory.
pub fn kv_tokens_per_rank(gpu: &Gpu, weights: f64, kv_bytes_per_token: u64, mem_fraction: f64) -> u64 {
    ((gpu.memory_bytes() * mem_fraction - weights) / kv_bytes_per_token.max(1) as f64).max(0.0) as u64
}

/// `ADDED_OUTPUT_LEN`.
const ADDED_OUTPUT_LEN: u64 = 6;
/// `router_max_wait_tokens` (+ `dp_prefill_wait_step` 0 + 1 in the chunk delay).
const ROUTER_MAX_WAIT_TOKENS: u64 = 6;

/// LightLLM's queues.
pub struct Lightllm {
    cfg: EngineConfig,
    waiting: VecDeque<ReqId>,
    /// The running batch's requests, in admission order.
    running: Vec<ReqId>,
    /// Paused requests (in `waiting`): `pause_req_dict`, counted against `running_max_req_size`.
    paused: HashSet<ReqId>,
    /// `ChunkedPrefillState.need_prefill_count`: admitted batches waiting for a prefill pass.
    need_prefill_count: u32,
    /// `ChunkedPrefillState.current_wait_step`: steps with pending prefills but no prefill pass.
    current_wait_step: u64,
}

impl Lightllm {
    /// An idle router.
    pub fn new(cfg: EngineConfig) -> Self {
        Self {
            cfg,
            waiting: VecDeque::new(),
            running: Vec::new(),
            paused: HashSet::new(),
            need_prefill_count: 0,
            current_wait_step: 0,
        }
    }

    fn chunk(&self) -> u64 {
        if self.cfg.chunked_prefill_size == 0 {
            u64::MAX
        } else {
            self.cfg.chunked_prefill_size as u64
        }
    }

    /// The (a, b) pair of a request (`ChunkedPrefillReq.get_tuple_tokens`).
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

    /// Tokens a running request needs in the next step (`ChunkedPrefillReq.get_decode_need_tokens`):
    /// one to decode, or its next prefill chunk `min(remaining, chunk)`.
    fn decode_need(&self, r: &ReqRt) -> u64 {
        ((r.num_tokens - r.num_computed) as u64).min(self.chunk())
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

    /// `generate_new_batch`: admits waiting requests FIFO until the first refusal.
    fn admit(&mut self, reqs: &mut [ReqRt], cache: &mut dyn PrefixCache, now: f64) {
        let max_reqs = self.cfg.max_num_seqs as usize;
        if self.waiting.is_empty() || self.running.len() + self.paused.len() >= max_reqs {
            return;
        }
        let capacity = cache.usage().capacity_tokens.unwrap_or(u64::MAX);
        let mut pairs: Vec<(u64, u64)> = self.running.iter().map(|&id| self.footprint(&reqs[id as usize])).collect();
        // The running batch's decode need, then each admitted request's first chunk.
        let mut first_step: u64 = self.running.iter().map(|&id| self.decode_need(&reqs[id as usize])).sum();
        let mut admitted = false;
        while let Some(&id) = self.waiting.front() {
            let r = reqs[id as usize];
            let was_paused = self.paused.contains(&id);
            if pairs.len() + 1 + self.paused.len() - usize::from(was_paused) > max_reqs {
                break;
            }
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
            self.paused.remove(&id);
            self.running.push(id);
            admitted = true;
        }
        if admitted {
            self.need_prefill_count += 1;
        }
    }

    /// `_step`'s pause loop: while `_can_decode` fails, pauses the most recently admitted
    /// request (`select_paused_reqs` with `Fcfs`, one request a time).
    fn pause_for_decode(&mut self, reqs: &mut [ReqRt], cache: &mut dyn PrefixCache) -> u32 {
        let mut paused = 0;
        loop {
            let need: u64 = self.running.iter().map(|&id| self.decode_need(&reqs[id as usize])).sum();
            let u = cache.usage();
            let free = u.capacity_tokens.map_or(u64::MAX, |c| c - u.used_tokens + u.evictable_tokens);
            let Some(&id) = self.running.last().filter(|_| need > free) else { return paused };
            self.running.pop();
            cache.preempt(id);
            reqs[id as usize].preempted();
            self.waiting.push_front(id);
            self.paused.insert(id);
            paused += 1;
        }
    }

    /// `ChunkedPrefillState.need_prefill`.
    fn need_prefill(&mut self, pending: bool, decodes: bool) -> bool {
        if !decodes || self.current_wait_step >= ROUTER_MAX_WAIT_TOKENS || self.need_prefill_count > 0 {
            self.need_prefill_count = self.need_prefill_count.saturating_sub(1);
            self.current_wait_step = 0;
            pending
        } else {
            if pending {
                self.current_wait_step += 1;
            }
            false
        }
    }
}

impl Scheduler for Lightllm {
    fn enqueue(&mut self, id: ReqId, _priority: Option<i32>, _now: f64) {
        self.waiting.push_back(id);
    }

    fn schedule(&mut self, s: &mut Step) {
        let (now, reqs, cache, out) = (s.now, &mut *s.reqs, &mut *s.cache, &mut *s.out);
        out.clear();
        self.admit(reqs, cache, now);
        out.preempted += self.pause_for_decode(reqs, cache);
        // Decode pass.
        let decoding = |r: &ReqRt| r.num_computed + 1 == r.num_tokens;
        let mut decodes = false;
        for &id in &self.running {
            let r = reqs[id as usize];
            if decoding(&r) {
                decodes = true;
                if cache.grow(id, r.num_tokens as usize) {
                    out.push(id, &r, 1);
                }
            }
        }
        // Prefill pass, as a separate forward: every pending request's next chunk.
        let pending: Vec<ReqId> = self
            .running
            .iter()
            .copied()
            .filter(|&id| reqs[id as usize].num_computed + 1 < reqs[id as usize].num_tokens)
            .collect();
        if !self.need_prefill(!pending.is_empty(), decodes) {
            return;
        }
        let decode_shape = out.shape;
        out.shape.clear();
        for id in pending {
            let r = reqs[id as usize];
            let n = self.decode_need(&r);
            // The pause loop left room for every chunk; a refusal would be a cache bug.
            if cache.grow(id, (r.num_computed as u64 + n) as usize) {
                out.push(id, &r, n as u32);
            } else {
                debug_assert!(false, "LightLLM prefill chunk did not fit after the pause loop");
            }
        }
        out.second_pass = out.shape;
        out.shape = decode_shape;
    }

    fn finished(&mut self, id: ReqId) {
        self.running.retain(|&x| x != id);
    }

    fn queued(&self) -> (usize, usize) {
        (self.waiting.len(), self.running.len())
    }

    fn reject_head(&mut self) -> Option<ReqId> {
        let id = self.waiting.pop_front()?;
        self.paused.remove(&id);
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::NoCache;
    use crate::cost::BatchShape;
    use crate::engine::{Batch, EngineKind};

    fn cfg(max_reqs: u32, batch_max_tokens: u32, chunk: u32) -> EngineConfig {
        let version = crate::engine::EngineVersion::newest(EngineKind::Lightllm);
        EngineConfig {
            max_num_seqs: max_reqs,
            max_num_batched_tokens: batch_max_tokens,
            enable_chunked_prefill: false,
            chunked_prefill_size: chunk,
            max_prefill_tokens: 0,
            ..EngineConfig::new(version)
        }
    }

    /// Request `id` (prompt `prompt`, 100 outputs) admitted with `computed` tokens computed and
    /// held; `decoding` = it sampled its first token and waits to decode it.
    fn running(reqs: &mut Vec<ReqRt>, cache: &mut NoCache, prompt: u32, computed: u32, decoding: bool) -> ReqId {
        let id = reqs.len() as ReqId;
        let mut r = ReqRt::new(id, prompt, 100);
        cache.admit(id, id, prompt as usize, 0).unwrap();
        r.admitted_with(0, 0.0);
        r.num_computed = computed;
        if decoding {
            (r.num_tokens, r.generated) = (prompt + 1, 1);
        }
        assert!(cache.grow(id, computed as usize));
        reqs.push(r);
        id
    }

    fn step(s: &mut Lightllm, reqs: &mut [ReqRt], cache: &mut NoCache) -> Batch {
        let mut out = Batch::default();
        s.schedule(&mut Step { now: 0.0, reqs, cache, out: &mut out });
        out
    }

    #[test]
    fn peak_need_by_hand() {
        // Sorted by b: (10, 100), (50, 20), (5, 0) → max(100·1 + 10, 20·2 + 60, 0·3 + 65) = 110.
        assert_eq!(Lightllm::peak_need(&mut [(50, 20), (5, 0), (10, 100)]), 110);
        assert_eq!(Lightllm::peak_need(&mut []), 0);
    }

    /// `select_paused_reqs` pauses one `group_req_id` (one request here) per `_can_decode`
    /// check, not every request admitted in the same round.
    #[test]
    fn pauses_one_request_at_a_time() {
        // Three decoding requests holding 3 tokens each in 11 slots: 2 free, 3 needed.
        let (mut reqs, mut cache) = (Vec::new(), NoCache::new(Some(11)));
        let ids: Vec<ReqId> = (0..3).map(|_| running(&mut reqs, &mut cache, 3, 3, true)).collect();
        let mut s = Lightllm::new(cfg(1000, 8448, 4096));
        s.running = ids;
        let out = step(&mut s, &mut reqs, &mut cache);
        // Pausing request 2 frees 3 slots: 5 free ≥ 2 needed; 0 and 1 decode.
        assert_eq!(out.preempted, 1);
        assert_eq!(s.running, vec![0, 1]);
        assert_eq!((s.waiting.front(), s.paused.contains(&2)), (Some(&2), true));
        assert_eq!(out.items, vec![(0, 1), (1, 1)]);
    }

    /// `get_decode_need_tokens` of a request with a pending prefill is its next chunk.
    #[test]
    fn decode_need_counts_pending_chunks() {
        // 0 decodes (holds 3); 1 has 6 prompt tokens left (holds 4), chunk 4: need 1 + 4 = 5.
        let build = |capacity| {
            let (mut reqs, mut cache) = (Vec::new(), NoCache::new(Some(capacity)));
            running(&mut reqs, &mut cache, 3, 3, true);
            running(&mut reqs, &mut cache, 10, 4, false);
            let mut s = Lightllm::new(cfg(1000, 8448, 4));
            s.running = vec![0, 1];
            s.need_prefill_count = 1;
            (s, reqs, cache)
        };
        // 11 slots, 7 held: 4 free < 5 → request 1 is paused though one decode token fits.
        let (mut s, mut reqs, mut cache) = build(11);
        let out = step(&mut s, &mut reqs, &mut cache);
        assert_eq!((out.preempted, s.running.clone(), out.items), (1, vec![0], vec![(0, 1)]));
        assert_eq!(out.second_pass, BatchShape::default());
        // 12 slots: 5 free, nothing paused; the decode and the 4-token chunk both run.
        let (mut s, mut reqs, mut cache) = build(12);
        let out = step(&mut s, &mut reqs, &mut cache);
        assert_eq!((out.preempted, out.items), (0, vec![(0, 1), (1, 4)]));
    }

    /// Paused requests count toward `running_max_req_size` (`exist_req_num` and `ok_req_num`),
    /// and the first-step budget starts from the running batch's decode need.
    #[test]
    fn paused_requests_count_toward_the_request_limit() {
        let (mut reqs, mut cache) = (Vec::new(), NoCache::new(Some(100_000)));
        running(&mut reqs, &mut cache, 3, 3, true);
        reqs.push(ReqRt::new(1, 5, 10));
        // One running and one paused of 2 allowed: no admission at all.
        let mut s = Lightllm::new(cfg(2, 8448, 4));
        s.running = vec![0];
        s.waiting.push_back(1);
        s.paused.insert(1);
        step(&mut s, &mut reqs, &mut cache);
        assert_eq!((s.running.clone(), s.waiting.len()), (vec![0], 1));
        // Not paused, the same request is admitted.
        s.paused.clear();
        step(&mut s, &mut reqs, &mut cache);
        assert_eq!(s.running, vec![0, 1]);
        // The first-step budget starts from the running batch's decode need: request 0 has 6
        // prompt tokens left (chunk 4), a new 5-token prompt's first chunk is 4: 4 + 4 = 8.
        let admits = |batch_max_tokens| {
            let (mut reqs, mut cache) = (Vec::new(), NoCache::new(Some(100_000)));
            running(&mut reqs, &mut cache, 10, 4, false);
            reqs.push(ReqRt::new(1, 5, 10));
            let mut s = Lightllm::new(cfg(1000, batch_max_tokens, 4));
            s.running = vec![0];
            s.waiting.push_back(1);
            step(&mut s, &mut reqs, &mut cache);
            s.running.len() == 2
        };
        assert!(admits(8));
        assert!(!admits(7), "counting one token per running request would give 1 + 4 = 5 ≤ 7");
    }

    /// A prefill pass gives every pending request `min(remaining, chunk)`, with no cap per pass.
    #[test]
    fn prefill_pass_has_no_token_cap() {
        let (mut reqs, mut cache) = (Vec::new(), NoCache::new(Some(100_000)));
        for prompt in [10, 3, 6] {
            running(&mut reqs, &mut cache, prompt, 0, false);
        }
        let mut s = Lightllm::new(cfg(1000, 8, 4));
        s.running = vec![0, 1, 2];
        s.need_prefill_count = 1;
        let out = step(&mut s, &mut reqs, &mut cache);
        // 4 + 3 + 4 = 11 tokens in one pass although batch_max_tokens is 8.
        assert_eq!(out.items, vec![(0, 4), (1, 3), (2, 4)]);
        assert_eq!(out.second_pass.tokens(), 11);
    }
}
