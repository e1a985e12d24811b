//! vLLM V0 async output processing (`ModelConfig.use_async_output_proc`, on by default with CUDA
//! graphs; docs/engines/multistep.md) on an [`Instance`]. At a batch's end the sampled tokens
//! join their sequences without a stop check (`LLMEngine._advance_to_next_step`, vLLM 0.6.0 and
//! 0.9 `vllm/engine/llm_engine.py`) and the batch's output waits in `ctx.output_queue`; the model
//! runner processes it from the callback it calls after launching the *next* batch's forward
//! (`ModelRunner.execute_model` → `async_callback`; multi-step: `MultiStepModelRunner.
//! _async_process_outputs`), so its tokens reach the client after the next batch's host part
//! (scheduling and input preparation), and a request whose last token came is found finished
//! only then: it was scheduled once more (its seat, its KV and lookahead slots, the device work:
//! `_process_model_outputs` skips it as `finished_before`) and is freed then
//! (`free_finished_seq_groups`). When nothing is scheduled the output is processed at once
//! (`LLMEngine.step`: "Nothing scheduled => … finish it here"); a preemption victim's output is
//! processed before it is preempted, and a victim found finished is freed instead (vLLM 0.9
//! `Scheduler._schedule_running`, [`crate::engine::VllmQueues::schedule_running_ahead`]).

use super::{Instance, Sink};
use crate::cache::ReqId;
use crate::engine::ReqRt;
use crate::sim::TokenRecord;

/// One request's output of the last batch, not yet processed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pending {
    pub id: ReqId,
    /// Tokens in the chunk.
    pub tokens: u32,
    /// When the scheduler processed it early (a preemption victim), else `None`: processed with
    /// the others.
    pub at: Option<f64>,
    /// The scheduler already freed it (a finished victim).
    pub freed: bool,
}

impl Instance<'_> {
    /// The running batch sampled `tokens` tokens of `id` (`finished`: its last ones): noted in
    /// the step's record now, delivered with the next batch ([`Instance::deliver_pending`]).
    pub(super) fn pend(&mut self, id: ReqId, tokens: u32, finished: bool) {
        self.note_sampled(id, true, finished);
        self.pending.push(Pending { id, tokens, at: None, freed: false });
    }

    /// After the scheduler formed a batch at `now`: the pending outputs it processed early
    /// (preemption victims) are delivered at `now`; the finished ones were freed.
    pub(super) fn processed_early(&mut self, now: f64, rt: &[ReqRt]) {
        for &id in &self.batch.processed {
            if let Some(p) = self.pending.iter_mut().find(|p| p.id == id) {
                let r = &rt[id as usize];
                p.at = Some(now);
                p.freed = r.generated >= r.output_len;
            }
        }
    }

    /// A request of the running batch that was already finished (its last token came in the
    /// batch before, its output processed during this one): the batch does nothing for it.
    pub(super) fn rides(&self, r: &ReqRt) -> bool {
        self.async_out && r.output_len > 0 && r.generated >= r.output_len
    }

    /// Delivers the last batch's pending outputs: at `self.pending_at` (the running batch's
    /// forward launch), or at `end` when none was set, the early ones at their own time.
    pub(super) fn deliver_pending(&mut self, rt: &mut [ReqRt], out: &mut Sink<'_>, end: f64) {
        let t = self.pending_at.take().unwrap_or(end);
        let mut pending = std::mem::take(&mut self.pending);
        pending.sort_by(|a, b| a.at.unwrap_or(t).total_cmp(&b.at.unwrap_or(t)));
        for p in pending.drain(..) {
            self.deliver(p.id, p.tokens, p.at.unwrap_or(t), !p.freed, false, rt, out);
        }
        self.pending = pending;
    }

    /// A chunk of `m` tokens of `id` (its last ones sampled) reaches the client at `t`: one
    /// inter-token gap, the tokens counted, its first/last token times; a request whose output
    /// is complete ends (`release`: its cache and scheduler entries too; `composition`: noted
    /// in the running step's record).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn deliver(
        &mut self,
        id: ReqId,
        m: u32,
        t: f64,
        release: bool,
        composition: bool,
        rt: &mut [ReqRt],
        out: &mut Sink<'_>,
    ) {
        let r = &mut rt[id as usize];
        if !r.last_token_s.is_nan() {
            out.log.chunk(t - r.last_token_s, m as u64);
        }
        out.log.count(t, m);
        if out.keep.tokens {
            for index in r.generated - m..r.generated {
                out.tokens.push(TokenRecord { id, index, time_s: t });
            }
        }
        let done = r.generated == r.output_len;
        if composition {
            self.note_sampled(id, true, done);
        }
        if r.first_token_s.is_nan() {
            r.first_token_s = t;
            out.first_tokens.push(id);
        }
        r.last_token_s = t;
        if done {
            self.complete(id, r, t, release, out);
        }
    }
}
