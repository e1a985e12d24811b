//! vLLM V0 multi-step scheduling (`--num-scheduler-steps N`, docs/engines/multistep.md) on an
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

impl Instance<'_> {
    /// Prices the running multi-step batch (`self.batch.steps() > 1`) starting at `now`: records
    /// when each of its steps ends in `self.step_ends` and returns the batch's seconds.
    pub(super) fn price_multi_step(&mut self, now: f64, rt: &[ReqRt]) -> f64 {
        let steps = self.batch.steps();
        debug_assert!(steps > 1 && self.batch.second_pass.seqs == 0);
        let mut shape = self.batch.shape;
        // The decodes' contexts at the first step.
        let context = |i: usize| rt[self.batch.items[i].0 as usize].num_computed as u64;
        let items = self.batch.items.len();
        debug_assert_eq!((0..items).map(context).sum::<u64>(), shape.decode_ctx_tokens, "the first step's contexts");
        let host = self.cost.step_parts(&shape).host_s;
        let mut device = Vec::with_capacity(steps as usize);
        for step in 0..steps as u64 {
            device.push(self.cost.step_parts(&shape).device_s);
            shape.advance_decodes((0..items).map(|i| context(i) + step + 1));
        }
        let sum: f64 = device.iter().sum();
        let total = StepTime { device_s: sum, host_s: host }.total(self.engine.overlap);
        // The host's share before the first forward step (none where it is overlapped).
        let mut t = now + (total - sum);
        self.forward_s = t;
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
    /// their last step). Under async output processing the last step's output waits for the next
    /// batch ([`super::async_out`]): every chunk but those of requests that finished before the
    /// last step, whose output was processed within the batch.
    pub(super) fn end_multi_step(&mut self, rt: &mut [ReqRt], out: &mut Sink<'_>) {
        let ends = std::mem::take(&mut self.step_ends);
        let steps = ends.len() as u32;
        debug_assert!(steps > 1 && self.role != Role::Prefill);
        // (delivery time, request, tokens in the chunk)
        let mut chunks = Vec::with_capacity(self.batch.items.len());
        for idx in 0..self.batch.items.len() {
            let (id, k) = self.batch.items[idx];
            debug_assert_eq!(k, 1, "a multi-step batch holds decodes only");
            if self.rides(&rt[id as usize]) {
                continue;
            }
            let r = &mut rt[id as usize];
            debug_assert!(r.generated > 0 && r.num_computed + 1 == r.num_tokens);
            let m = (r.output_len - r.generated).min(steps);
            let finished = r.generated + m == r.output_len;
            r.num_computed += m;
            r.generated += m;
            if self.tracks_computed {
                self.cache.computed(id, r.num_computed as usize);
            }
            if self.async_out && (!finished || m == steps) {
                // The last step's tokens join the sequence unchecked (`_advance_to_next_step`).
                r.num_tokens += m;
                self.pend(id, m, finished);
                continue;
            }
            r.num_tokens += m - finished as u32;
            chunks.push((ends[m as usize - 1], id, m));
        }
        chunks.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (t, id, m) in chunks {
            self.deliver(id, m, t, true, true, rt, out);
        }
    }

    /// A request whose last token was delivered at `t`: its cache and scheduler entries end
    /// (`release`; else the scheduler freed it already), the unified instance counts its prompt,
    /// and its record goes out.
    pub(super) fn complete(&mut self, id: ReqId, r: &ReqRt, t: f64, release: bool, out: &mut Sink<'_>) {
        if release {
            self.cache.finish(id);
            self.sched.finished(id);
        }
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
            priority: r.priority.unwrap_or(0),
        });
        out.finished.push(id);
    }
}
