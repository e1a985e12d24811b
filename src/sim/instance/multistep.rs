//! vLLM V0 multi-step scheduling (`--num-scheduler-steps N`, docs/addendum-multistep.md) on an
//! [`Instance`]: a decode batch, scheduled once, runs N forward steps. Pricing: the host part
//! (scheduling, input preparation) once, then each step's device part with every sequence's
//! context one token longer than at the step before — finished sequences included, as vLLM
//! keeps the batch frozen until its last step (`LLMEngine._has_remaining_steps`). Effects: each
//! request gains one token a step until its output is complete; its tokens reach the client as
//! one chunk (one inter-token gap, as the benchmark clients count chunks) at the end of the
//! batch, or at the end of the step where it finished (vLLM 0.6.0 `_process_model_outputs`
//! builds a finished request's output as soon as that step's output is processed; the others'
//! only for the last step).

use super::{Instance, Role, Sink};
use crate::cache::ReqId;
use crate::cost::StepTime;
use crate::engine::ReqRt;
use crate::metrics::RequestRecord;
use crate::sim::TokenRecord;

impl Instance<'_> {
    /// Prices the running multi-step batch (`self.batch.steps() > 1`) starting at `now`: records
    /// when each of its steps ends in `self.step_ends` and returns the batch's seconds.
    pub(super) fn price_multi_step(&mut self, now: f64) -> f64 {
        let steps = self.batch.steps();
        debug_assert!(steps > 1 && self.batch.second_pass.seqs == 0);
        let mut shape = self.batch.shape;
        let host = self.cost.step_parts(&shape).host_s;
        let mut device = Vec::with_capacity(steps as usize);
        for _ in 0..steps {
            device.push(self.cost.step_parts(&shape).device_s);
            shape.decode_ctx_tokens += shape.decode_seqs as u64;
        }
        let sum: f64 = device.iter().sum();
        let total = StepTime { device_s: sum, host_s: host }.total(self.engine.overlap);
        // The host's share before the first forward step (none where it is overlapped).
        let mut t = now + (total - sum);
        self.step_ends.clear();
        for d in device {
            t += d;
            self.step_ends.push(t);
        }
        if let Some(last) = self.step_ends.last_mut() {
            *last = now + total;
        }
        total
    }

    /// Applies the effects of a multi-step decode batch at its end: every item decodes up to
    /// `steps` tokens; chunks are delivered in time order (finished requests first, at the end of
    /// their last step).
    pub(super) fn end_multi_step(&mut self, rt: &mut [ReqRt], out: &mut Sink<'_>) {
        let ends = std::mem::take(&mut self.step_ends);
        let steps = ends.len() as u32;
        debug_assert!(steps > 1 && self.role != Role::Prefill);
        // (delivery time, request, tokens in the chunk)
        let mut chunks = Vec::with_capacity(self.batch.items.len());
        for &(id, k) in &self.batch.items {
            debug_assert_eq!(k, 1, "a multi-step batch holds decodes only");
            let r = &mut rt[id as usize];
            debug_assert!(r.generated > 0 && r.num_computed + 1 == r.num_tokens);
            let m = (r.output_len - r.generated).min(steps);
            let finished = r.generated + m == r.output_len;
            r.num_computed += m;
            r.generated += m;
            r.num_tokens += m - finished as u32;
            if self.tracks_computed {
                self.cache.computed(id, r.num_computed as usize);
            }
            chunks.push((ends[m as usize - 1], id, m));
        }
        chunks.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (t, id, m) in chunks {
            let i = id as usize;
            let r = &mut rt[i];
            if !r.last_token_s.is_nan() {
                out.log.gap(t - r.last_token_s);
            }
            out.log.count(t, m);
            if out.keep.tokens {
                for index in r.generated - m..r.generated {
                    out.tokens.push(TokenRecord { id, index, time_s: t });
                }
            }
            let done = r.generated == r.output_len;
            if let Some(c) = self.composition.as_mut() {
                c.sampled.push(id);
                if done {
                    c.finished.push(id);
                }
            }
            if r.first_token_s.is_nan() {
                r.first_token_s = t;
                out.first_tokens.push(id);
            }
            r.last_token_s = t;
            if done {
                self.complete(id, r, t, out);
            }
        }
    }

    /// A request whose last token was delivered at `t`: its cache and scheduler entries end,
    /// the unified instance counts its prompt, and its record goes out.
    pub(super) fn complete(&mut self, id: ReqId, r: &ReqRt, t: f64, out: &mut Sink<'_>) {
        self.cache.finish(id);
        self.sched.finished(id);
        let q = &out.w.requests[id as usize];
        if self.role == Role::Unified {
            self.stats.prompt_tokens += q.prompt_len as u64;
            self.stats.cached_prompt_tokens += r.cached_prompt_tokens as u64;
        }
        out.records.push(RequestRecord {
            id,
            send_s: out.send_s[id as usize],
            first_token_s: r.first_token_s,
            last_token_s: t,
            prompt_tokens: q.prompt_len,
            output_tokens: r.output_len,
            cached_prompt_tokens: r.cached_prompt_tokens,
            preemptions: r.preemptions,
            first_scheduled_s: r.first_scheduled_s,
        });
        out.finished.push(id);
    }
}
