//! Coalesced decode steps. Between two events that change a batch — an arrival, an admission,
//! a finish, a preemption, a first token, a router reading the instance — a vLLM v1 instance
//! runs the same decodes step after step, each request's context one token longer each time.
//! [`Instance::coalesce`] runs such a stretch as one event: it ends the step in flight and
//! forms the next ones in place, without the driver, the scheduler or the batch, and leaves
//! the stretch's last step in flight, so the driver sees one step end where it would have seen
//! many. Every figure is computed as the stepped run computes it, in the same order where order
//! matters: each step is priced from its own shape (the decodes' context grows by the batch
//! size a step: the same integers; through the cost model's
//! [`DecodePricer`](crate::cost::DecodePricer) where it has one, which computes the terms that
//! do not change once a stretch and gives the same bits), its end time is the previous end
//! plus its price (the same additions), every gap is the same subtraction, and the cache's
//! allocations and registrations happen at the steps and in the order they would
//! ([`PrefixCache::grow_quietly`](crate::cache::PrefixCache::grow_quietly)). The stepped path
//! is kept ([`Keep::every_step`], `--no-step-coalescing`) and the test suite runs the golden
//! schedules and the examples both ways and compares every byte.
//!
//! A stretch stops before a step that could differ: one whose formation would preempt
//! (allocation beyond the free blocks), could admit the refused waiting head (an eviction of a
//! block it hits or the registration of the first block it misses; nothing admissible stays
//! inadmissible otherwise, since the stretch only takes blocks), or starts at or after the
//! driver's horizon (the next arrival, failure or autoscaler sync, when another instance may
//! route to or read this one); and before a step end that would finish a request. Which runs
//! coalesce: vLLM v1 and TensorRT-LLM instances (not under PP, speculative decoding or
//! disaggregation) whose cache says how it grows (the paged cache with prefix caching on; the
//! hybrid manager's sliding-window groups, while no waiting head is refused), with no KV tier,
//! LMCache's (a decoding request saves nothing, and its disk writes settle by their end times
//! whenever it is next called) or vLLM's own while no request waits or holds a load and none
//! offers again after a refused store (a copy seen complete in a stretch is seen at the next
//! step formed instead, since nothing reads the tier in between: the steps skipped are counted
//! for its polls, [`Scheduler::coalesced`](crate::engine::Scheduler::coalesced)); every other
//! engine, cache and layout steps as before. TensorRT-LLM's requests take their blocks to
//! completion when admitted, so its stretches allocate nothing and its refused head stays
//! refused until a finish ends the stretch.

use super::{Instance, Role};
use crate::cache::ReqId;
use crate::engine::{Admission, EngineKind, ReqRt};
use crate::metrics::TokenLog;
use crate::sim::{Keep, TokenRecord};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Steps a growth is usually due within (a block's tokens at most): kept in buckets by step.
const WHEEL: u32 = 64;

/// The steps at which the batch's requests next grow, each a batch index: a bucket per step
/// for the next [`WHEEL`] steps (a growth is due within a block's tokens, most often 16), a
/// heap for any later. [`take`](Due::take) hands out a step's growths in batch order, as the
/// stepped path grows them.
#[derive(Default)]
struct Due {
    wheel: Vec<Vec<u32>>,
    far: BinaryHeap<Reverse<(u32, u32)>>,
}

impl Due {
    /// Empties it.
    fn clear(&mut self) {
        self.wheel.resize_with(WHEEL as usize, Vec::new);
        self.wheel.iter_mut().for_each(Vec::clear);
        self.far.clear();
    }

    /// Request `j` grows at step `at`, after step `now`.
    #[inline]
    fn push(&mut self, now: u32, at: u32, j: u32) {
        debug_assert!(at > now, "a growth due before the step that plans it");
        if at - now < WHEEL {
            self.wheel[(at % WHEEL) as usize].push(j);
        } else {
            self.far.push(Reverse((at, j)));
        }
    }

    /// The requests growing at step `at` (every earlier step taken), in batch order, into `out`.
    fn take(&mut self, at: u32, out: &mut Vec<u32>) {
        out.clear();
        // A bucket holds only this step's: an entry of a later step with the same remainder
        // was due `WHEEL` or more steps after its push, so went to the heap.
        out.append(&mut self.wheel[(at % WHEEL) as usize]);
        while let Some(&Reverse((t, j))) = self.far.peek() {
            if t != at {
                debug_assert!(t > at, "a growth passed over");
                break;
            }
            self.far.pop();
            out.push(j);
        }
        out.sort_unstable();
    }
}

/// Buffers of a stretch, kept with the instance so a stretch allocates nothing once warm.
#[derive(Default)]
pub(super) struct Stretch {
    /// Per request of the batch, in batch order: tokens computed before the stretch's first
    /// step ended, and outputs sampled by then.
    computed: Vec<u32>,
    generated: Vec<u32>,
    /// Each request's next growth that allocates or registers a block, by step.
    due: Due,
    /// The growths of one step, and whose they are.
    grows: Vec<(ReqId, usize)>,
    growing: Vec<u32>,
}

impl Instance<'_> {
    /// Whether this instance's steps can be coalesced at all: vLLM v1 (or TensorRT-LLM, which
    /// forms its batch by the same rule), one batch at a time, whole requests, no speculative
    /// tokens, a cache that computes nothing after a step.
    fn coalesces(&self) -> bool {
        matches!(self.engine.engine, EngineKind::Vllm | EngineKind::Trtllm)
            && self.max_in_flight == 1
            && !self.async_out
            && self.spec_extra <= 0.0
            && self.role == Role::Unified
            && (!self.tracks_computed || self.cache.computed_is_a_count())
    }

    /// The step just formed runs decodes alone and none of its requests finishes at its end:
    /// returns the smallest count of outputs any of them has left (at least 2), and whom the
    /// waiting head is that the steps after it refuse (`Some(None)`: they admit nobody).
    fn decode_stretch(&self, rt: &[ReqRt]) -> Option<(u32, Option<ReqId>)> {
        let b = &self.batch;
        if b.items.is_empty()
            || b.steps() > 1
            || b.preempted > 0
            || b.second_pass.seqs > 0
            || b.shape.prefill_tokens > 0
            || b.shape.decode_seqs as usize != b.items.len()
            || self.sched.queued().1 != b.items.len()
        {
            return None;
        }
        let mut left = u32::MAX;
        for &(id, k) in &b.items {
            let r = &rt[id as usize];
            // A decode after the first token: a one-token prompt chunk samples a first token.
            if k != 1
                || r.generated == 0
                || r.first_token_s.is_nan()
                || r.num_computed + 1 != r.num_tokens
                || r.generated >= r.output_len
            {
                return None;
            }
            left = left.min(r.output_len - r.generated);
        }
        if left < 2 {
            return None;
        }
        match self.sched.admission(b.items.len() as u32) {
            Admission::Closed => Some((left, None)),
            Admission::Refused(head) => Some((left, Some(head))),
            Admission::Open => None,
        }
    }

    /// Runs the decode steps that follow the step just begun (ending at `end`) as one event, as
    /// far as they can be known now (see the module): each ends with its tokens logged and the
    /// next formed in place; the last stays in flight. `horizon`: no step may start at or after
    /// it (the next event that may read or change this instance). Returns when the step now in
    /// flight ends (`end` when nothing was coalesced).
    pub fn coalesce(
        &mut self,
        end: f64,
        rt: &mut [ReqRt],
        keep: Keep,
        horizon: f64,
        log: &mut TokenLog,
        tokens: &mut Vec<TokenRecord>,
    ) -> f64 {
        // Under PP the step begun may be queued behind the one in flight: never coalesced.
        if keep.every_step || end >= horizon || !self.coalesces() {
            return end;
        }
        debug_assert_eq!(self.busy_until, Some(end), "the step begun is the one in flight");
        let Some((left, refused)) = self.decode_stretch(rt) else { return end };
        if refused.is_some() && !self.cache.grows_past_refused() {
            return end;
        }
        let mut s = std::mem::take(&mut self.stretch);
        s.computed.clear();
        s.generated.clear();
        s.due.clear();
        for (j, &(id, _)) in self.batch.items.iter().enumerate() {
            let r = &rt[id as usize];
            let Some(quiet) = self.cache.quiet_until(id) else {
                self.stretch = s;
                return end;
            };
            debug_assert!(quiet > r.num_computed as usize, "the step formed has grown the request");
            s.computed.push(r.num_computed);
            s.generated.push(r.generated);
            // Step m grows the request to computed + m + 1 tokens.
            s.due.push(0, (quiet - r.num_computed as usize) as u32, j as u32);
        }
        let mut shape = self.batch.shape;
        debug_assert_eq!(
            shape.local.map(|w| s.computed.iter().map(|&c| w.before(c as u64)).sum::<u64>()),
            shape.local.map(|_| shape.local_decode_ctx_tokens),
            "the first step's decodes read from the contexts the stretch starts at"
        );
        let (mut m, mut end, mut prev) = (0u32, end, f64::NAN);
        let mut held = None;
        // The steps' price with what does not change in the stretch computed once, where the
        // cost model can (a step launched eagerly is priced by `price` as before).
        let pricer = (shape.prefill_tokens == 0 && self.engine.decode_graphs.captures(shape.seqs))
            .then(|| self.cost.decode_pricer(&shape, self.engine.overlap))
            .flatten();
        // Step m + 1 is formed at step m's end when that end finishes nobody and comes before
        // the horizon.
        while m + 2 <= left && end < horizon {
            let next = m + 1;
            s.grows.clear();
            s.due.take(next, &mut s.growing);
            for &j in &s.growing {
                let id = self.batch.items[j as usize].0;
                s.grows.push((id, (s.computed[j as usize] + next + 1) as usize));
            }
            if !s.grows.is_empty() && !self.cache.grow_quietly(&s.grows, refused) {
                break; // step `next` is the scheduler's to form
            }
            for &j in &s.growing {
                let id = self.batch.items[j as usize].0;
                let quiet = self.cache.quiet_until(id).expect("a running request");
                let at = (quiet - s.computed[j as usize] as usize) as u32;
                debug_assert!(at > next, "a growth leaves room for the next token");
                s.due.push(next, at, j);
            }
            self.end_quietly(m, end, prev, &s, rt, keep, log, tokens);
            shape.advance_decodes(s.computed.iter().map(|&c| (c + next) as u64));
            self.batch.shape = shape;
            if keep.schedule {
                let items = self.batch.items.iter().zip(&s.computed).map(|(&(id, k), &c)| (id, k, c + next));
                self.composition = Some(self.composed(items, Vec::new()));
            }
            // As `begin_step` prices it: the batch, then its (empty) second pass.
            let step = pricer.map_or_else(|| self.price(&shape), |p| p.step_time(shape.decode_ctx_tokens));
            debug_assert_eq!(step.to_bits(), self.price(&shape).to_bits(), "the stretch's pricer is exact");
            let dt = step + self.price(&self.batch.second_pass);
            // The KV held changes only where a growth allocated (nothing else touches this
            // instance's cache during a stretch).
            let kv = match held {
                Some(kv) if s.grows.is_empty() => kv,
                _ => self.held_kv_tokens(),
            };
            held = Some(kv);
            self.account_held(end, dt, keep, kv);
            self.coalesced_steps += 1;
            (prev, end, m) = (end, end + dt, next);
        }
        if m > 0 {
            // The requests as the `m` step ends left them; their blocks sized for the step in
            // flight (`grow` only counts tokens here: the growths that allocate are done).
            for (j, &(id, _)) in self.batch.items.iter().enumerate() {
                let r = &mut rt[id as usize];
                r.num_computed = s.computed[j] + m;
                r.num_tokens = r.num_computed + 1;
                r.generated = s.generated[j] + m;
                r.last_token_s = prev;
                if self.tracks_computed {
                    // What step `m`'s end would have told the cache.
                    self.cache.computed(id, r.num_computed as usize);
                }
                let grown = self.cache.grow(id, r.num_tokens as usize);
                debug_assert!(grown, "a growth within the last block failed");
            }
            self.busy_until = Some(end);
            self.sched.coalesced(m);
        }
        self.stretch = s;
        end
    }

    /// Step `m` of a stretch ends at `end` (the step before it at `prev`) with one token for
    /// every request and no finish: its gaps and tokens logged, its record kept.
    #[allow(clippy::too_many_arguments)]
    fn end_quietly(
        &mut self,
        m: u32,
        end: f64,
        prev: f64,
        s: &Stretch,
        rt: &[ReqRt],
        keep: Keep,
        log: &mut TokenLog,
        tokens: &mut Vec<TokenRecord>,
    ) {
        let n = self.batch.items.len();
        if m == 0 {
            // The first step's requests each saw their last token at their own time.
            for &(id, _) in &self.batch.items {
                let last = rt[id as usize].last_token_s;
                if !last.is_nan() {
                    log.gap(end - last);
                }
            }
        } else {
            log.gaps_of(end - prev, n as u64);
        }
        if keep.tokens {
            for (&(id, _), &g) in self.batch.items.iter().zip(&s.generated) {
                tokens.push(TokenRecord { id, index: g + m, time_s: end });
            }
        }
        log.count(end, n as u32);
        if let Some(mut c) = self.composition.take() {
            c.sampled.extend(self.batch.items.iter().map(|&(id, _)| id));
            self.schedule.push(c);
        }
    }
}
