//! SGLang's scheduler (ENGINE_SPEC §3.4–3.8). Each step is a prefill ("extend") batch or a
//! decode batch, prefill first. A prefill batch takes the in-progress chunked request first,
//! then waiting requests in policy order while the budgets last: `max_prefill_tokens`,
//! `chunked_prefill_size` (at most one request is split), and the memory budget
//! `available + evictable − Σ_running min(max_new − out, 4096) × new_token_ratio`, which every
//! admitted request lowers by its extend length plus `min(max_new, 4096)`. A memory or
//! request-count refusal sets `batch_is_full`: no prefill is tried again until a request leaves.
//! Before a decode step, if the pool cannot hold one more token per request, requests are
//! retracted — fewest outputs first, longest prompt on ties — to the end of the waiting queue,
//! and new_token_ratio jumps; otherwise it decays towards its floor. Under a window pool (a
//! model with sliding-window layers, [`swa`]) the budget also counts that pool's free and
//! evictable slots less each admitted request's peak window, the latch is cleared every pass,
//! and each decode step first frees what slid out of its requests' windows.

pub mod hicache;
pub mod launch;
pub mod mamba;
pub mod memory;
pub mod priority;
pub mod storage_extra;
pub mod swa;

use super::frontend::FailReason;
use super::{EngineConfig, ReqRt, SchedulePolicy, Scheduler, Step};
use crate::cache::{Policy, PrefixCache, ReqId};
use crate::workload::prefix_trie::{build_trie, Tokens};
use crate::workload::TokenStore;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::sync::Arc;

/// `SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`.
const CLIP_MAX_NEW: u64 = 4096;
/// `IGNORE_EOS_RESERVE_TOKENS`: free tokens per running request `add_one_req_ignore_eos` keeps.
const IGNORE_EOS_RESERVE: f64 = 1.0;
/// `SGLANG_INIT_NEW_TOKEN_RATIO`, `SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`,
/// `SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`, `SGLANG_RETRACT_DECODE_STEPS`.
const INIT_RATIO: f64 = 0.7;
const MIN_RATIO_FACTOR: f64 = 0.14;
const DECAY_STEPS: f64 = 600.0;
const RETRACT_DECODE_STEPS: f64 = 20.0;
/// Above this many waiting requests LPM keeps the current order
/// (`WAITING_QUEUE_PREFIX_MATCH_MAX`, which also bounds the waiting-prefix refresh).
const LPM_FALLBACK_WAITING: usize = 128;
/// `WAITING_PREFIX_REFRESH_INTERVAL`: the waiting-prefix refresh runs on every 32nd priority
/// computation (`schedule_policy.py`, 0.5.23).
const REFRESH_INTERVAL: u64 = 32;
/// `IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD` and `…_DEPRIORITIZE_THRESHOLD`.
const IN_BATCH_CHECK: usize = 32;
const IN_BATCH_DEPRIORITIZE: usize = 32;

/// SGLang's queues and budgets.
pub struct Sglang {
    cfg: EngineConfig,
    store: Arc<TokenStore>,
    waiting: Vec<ReqId>,
    running: Vec<ReqId>,
    /// Prefilled in the last step; they join `running` at the next one.
    prefilled: Vec<ReqId>,
    chunked: Option<ReqId>,
    batch_is_full: bool,
    ratio: f64,
    init_ratio: f64,
    min_ratio: f64,
    decay: f64,
    rng: StdRng,
    /// Priority computations that could refresh the waiting prefixes so far
    /// (`SchedulePolicy._waiting_prefix_refresh_calls`).
    refresh_calls: u64,
    /// `--enable-priority-scheduling`: each held request's priority and queue-entry order.
    prio: Option<priority::Priorities>,
    /// Requests `--max-queued-requests` aborted, until the instance takes them.
    aborted: Vec<super::Aborted>,
    /// Requests queued since the last pass, whose storage lookup (`_prefetch_kvcache`, at
    /// `_add_request_to_queue`) the next pass makes before its events, as SGLang receives them.
    arrived: Vec<ReqId>,
    /// Requests that left the waiting queue aborted since the last pass: the next pass ends
    /// their storage lookups and retries (`release_aborted_request`).
    dropped: Vec<ReqId>,
    /// The current pass's time.
    now: f64,
}

impl Sglang {
    /// An idle scheduler.
    pub fn new(cfg: EngineConfig, store: Arc<TokenStore>) -> Self {
        let init = (INIT_RATIO * cfg.schedule_conservativeness).min(1.0);
        let min_ratio = (init * MIN_RATIO_FACTOR).min(1.0);
        Self {
            cfg,
            store,
            waiting: Vec::new(),
            running: Vec::new(),
            prefilled: Vec::new(),
            chunked: None,
            batch_is_full: false,
            ratio: init,
            init_ratio: init,
            min_ratio,
            decay: (init - min_ratio) / DECAY_STEPS,
            rng: StdRng::seed_from_u64(cfg.seed),
            refresh_calls: 0,
            prio: cfg.sglang_priority.map(priority::Priorities::new),
            aborted: Vec::new(),
            arrived: Vec::new(),
            dropped: Vec::new(),
            now: 0.0,
        }
    }

    /// Priority preemption is on (`enable_priority_preemption`).
    fn preempts(&self) -> bool {
        self.prio.as_ref().is_some_and(|p| p.cfg.preemption_threshold.is_some())
    }

    /// `_add_request_to_queue(is_retracted=True)` for a retracted or preempted request: to the
    /// queue's end, with a fresh entry time under priority scheduling; under a storage tier its
    /// retry counters start again and, once in the queue, it looks up again.
    fn requeue(&mut self, cache: &mut dyn PrefixCache, reqs: &[ReqRt], id: ReqId, now: f64) {
        if let Some(p) = self.prio.as_mut() {
            p.requeue(id);
        }
        if self.join_queue(id) && cache.has_storage() {
            cache.storage_requeued(id);
            let r = &reqs[id as usize];
            cache.storage_lookup(id, r.seq, r.num_tokens as usize, now, None);
        }
    }

    /// The end of `_add_request_to_queue`, with `_abort_on_queued_limit`: under
    /// `--max-queued-requests` a request finding the waiting queue full is aborted, unless
    /// priority scheduling finds a waiting request less important than it (the least important,
    /// the newest among equals), which is aborted in its place. Whether `id` joined.
    fn join_queue(&mut self, id: ReqId) -> bool {
        let full = self.cfg.max_queued_requests.is_some_and(|m| self.waiting.len() + 1 > m as usize);
        if !full {
            self.waiting.push(id);
            return true;
        }
        if let Some(p) = self.prio.as_mut() {
            let rank = |r: ReqId| {
                let e = p.entry(r);
                (p.cfg.key(e.priority), e.entered)
            };
            let least = (0..self.waiting.len()).max_by_key(|&i| rank(self.waiting[i]));
            if let Some(i) = least.filter(|&i| rank(id).0 < rank(self.waiting[i]).0) {
                let out = self.waiting.remove(i);
                p.forget(out);
                self.aborted.push((out, FailReason::PriorityAbort, priority::PRIORITY_ABORT));
                self.dropped.push(out);
                self.waiting.push(id);
                return true;
            }
            p.forget(id);
        }
        self.aborted.push((id, FailReason::QueueFull, priority::QUEUE_FULL));
        // A retracted request aborted here may hold a storage retry (SGLang's
        // `_release_aborted_request` cancels it).
        self.dropped.push(id);
        false
    }

    fn page(&self) -> u64 {
        self.cfg.page_size.max(1) as u64
    }

    /// Remaining outputs a request may still produce (ignore-EOS: exactly its output length).
    fn remaining_new(r: &ReqRt) -> u64 {
        r.output_len.saturating_sub(r.generated) as u64
    }

    fn order_waiting(&mut self, reqs: &[ReqRt], cache: &mut dyn PrefixCache) {
        let cache_aware = match self.cfg.schedule_policy {
            SchedulePolicy::Lpm => self.waiting.len() <= LPM_FALLBACK_WAITING,
            SchedulePolicy::DfsWeight => true,
            _ => false,
        };
        // `_compute_prefix_matches` matches every waiting request's whole known sequence against
        // the tree (`match_kv_cache` without a length cap, 0.5.23), so a fully cached prompt is
        // matched (and its node split) at its end, not one token before.
        // 0.4.10 matches one token short and sorts by that.
        // Under HiCache the match runs on into the host tier: the sort key counts both
        // (`match_kv_cache`: `num_matched_prefix_tokens = prefix_len + host_hit_length`).
        let whole = self.cfg.rules.sglang_match_waiting_whole;
        let full_hits: Vec<(usize, usize)> = if cache_aware {
            self.waiting
                .iter()
                .map(|&id| {
                    let r = &reqs[id as usize];
                    let len = r.num_tokens as usize;
                    if whole {
                        cache.touch_prefix_tiers(r.seq, len)
                    } else {
                        (cache.touch(r.seq, len).0, 0)
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        let view: &dyn PrefixCache = &*cache;
        match self.cfg.schedule_policy {
            SchedulePolicy::Fcfs => {
                if let Some(p) = &self.prio {
                    p.sort_fcfs(&mut self.waiting);
                }
            }
            SchedulePolicy::Lpm => {
                if self.waiting.len() <= LPM_FALLBACK_WAITING {
                    // In-batch prefix deprioritisation: a request with little cached that shares
                    // ≥ 32 tokens with an earlier waiting request waits for that one to be cached.
                    let mut in_queue = crate::cache::tree::RadixTree::new(1);
                    let keys: Vec<(usize, ReqId)> = self
                        .waiting
                        .iter()
                        .zip(&full_hits)
                        .map(|(&id, &(full, host))| {
                            let r = &reqs[id as usize];
                            let len = r.num_tokens as usize;
                            // The sort key is `num_matched_prefix_tokens`: the whole match,
                            // capped at one token less than the sequence (not page-aligned).
                            let hit = if whole { (full + host).min(len.saturating_sub(1)) } else { full };
                            if full <= IN_BATCH_CHECK {
                                if in_queue.peek(&self.store, r.seq, len) >= IN_BATCH_DEPRIORITIZE {
                                    return (usize::MAX, id);
                                }
                                in_queue.insert(&self.store, r.seq, len);
                            }
                            (hit, id)
                        })
                        .collect();
                    let mut keyed = keys;
                    // Stable sort: longest hit first, deprioritised (usize::MAX) last.
                    keyed.sort_by_key(|&(hit, _)| {
                        if hit == usize::MAX {
                            (1, std::cmp::Reverse(0))
                        } else {
                            (0, std::cmp::Reverse(hit))
                        }
                    });
                    self.waiting = keyed.into_iter().map(|(_, id)| id).collect();
                }
            }
            SchedulePolicy::DfsWeight => self.waiting = self.dfs_weight_order(reqs, view),
            SchedulePolicy::Lof => match &self.prio {
                Some(p) => p.sort_lof(&mut self.waiting, |id| reqs[id as usize].output_len),
                None => self.waiting.sort_by_key(|&id| std::cmp::Reverse(reqs[id as usize].output_len)),
            },
            SchedulePolicy::Random => self.waiting.shuffle(&mut self.rng),
        }
        if !cache_aware {
            self.refresh_waiting_prefixes(reqs, cache);
        }
    }

    /// The waiting-prefix refresh (`SchedulePolicy._touch_waiting_prefixes`,
    /// `managers/schedule_policy.py`, 0.5.23, on by default through
    /// `SGLANG_ENABLE_WAITING_PREFIX_REFRESH`): after a priority computation that matched no
    /// prefix, with requests waiting, every 32nd such computation (the first included) touches
    /// the cached prefix of each of the first 128 waiting requests' known tokens, the last
    /// first (`touch_waiting_prefix` → `RadixCache.touch_prefix`), so LRU eviction takes them
    /// in reverse admission order, after everything else.
    fn refresh_waiting_prefixes(&mut self, reqs: &[ReqRt], cache: &mut dyn PrefixCache) {
        if !self.cfg.rules.sglang_waiting_prefix_refresh || self.waiting.is_empty() {
            return;
        }
        let due = self.refresh_calls.is_multiple_of(REFRESH_INTERVAL);
        self.refresh_calls += 1;
        if !due {
            return;
        }
        let n = self.waiting.len().min(LPM_FALLBACK_WAITING);
        for &id in self.waiting[..n].iter().rev() {
            let r = &reqs[id as usize];
            cache.touch_prefix(r.seq, r.num_tokens as usize);
        }
    }

    /// `dfs-weight`: each waiting request sits at the tree node ending its cached prefix; a
    /// node weighs the requests in its subtree; depth-first from the root, heavier children
    /// first (ties: the one holding the earliest waiting request), a node's own requests after
    /// its children.
    fn dfs_weight_order(&self, reqs: &[ReqRt], cache: &dyn PrefixCache) -> Vec<ReqId> {
        let items: Vec<_> = self
            .waiting
            .iter()
            .map(|&id| {
                let r = &reqs[id as usize];
                (r.seq, cache.peek(r.seq, r.num_tokens as usize))
            })
            .collect();
        let trie = build_trie(&Tokens { store: &self.store, items });
        let n = trie.nodes.len();
        let mut first = vec![usize::MAX; n];
        let mut own: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (pos, &v) in trie.end_node.iter().enumerate() {
            own[v].push(pos);
            first[v] = first[v].min(pos);
        }
        let mut by_depth: Vec<usize> = (1..n).collect();
        by_depth.sort_by_key(|&v| std::cmp::Reverse(trie.nodes[v].depth));
        for &v in &by_depth {
            let p = trie.nodes[v].parent;
            first[p] = first[p].min(first[v]);
        }
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
        for v in 1..n {
            children[trie.nodes[v].parent].push(v);
        }
        for c in &mut children {
            c.sort_by_key(|&v| (std::cmp::Reverse(trie.count[v]), first[v]));
        }
        // Iterative post-order: (node, children visited?).
        let mut out = Vec::with_capacity(self.waiting.len());
        let mut stack = vec![(0usize, false)];
        while let Some((v, done)) = stack.pop() {
            if done {
                out.extend(own[v].iter().map(|&pos| self.waiting[pos]));
            } else {
                stack.push((v, true));
                stack.extend(children[v].iter().rev().map(|&c| (c, false)));
            }
        }
        out
    }

    /// Tokens a running request reserves for its remaining outputs (SGLang
    /// `PrefillAdder._get_running_request_total_token_offset`, `managers/schedule_policy.py`):
    /// clipped, scaled by new_token_ratio — or, for a request sent with `ignore_eos`, in full
    /// where the bundle says so (0.5.23; 0.4.10 scales every request).
    fn running_reserve(&self, r: &ReqRt) -> f64 {
        let full = r.ignore_eos && self.cfg.rules.sglang_ignore_eos_full_reserve;
        let ratio = if full { 1.0 } else { self.ratio };
        Self::remaining_new(r).min(CLIP_MAX_NEW) as f64 * ratio
    }

    /// Forms a prefill batch (SGLang `_get_new_batch_prefill_raw` with its `PrefillAdder`);
    /// false when there is none. Requests are matched, checked and pinned one by one; slots are
    /// allocated for the whole batch at the end, as `prepare_for_extend` does.
    fn prefill(&mut self, s: &mut Step) -> bool {
        let (now, reqs, cache, out) = (s.now, &mut *s.reqs, &mut *s.cache, &mut *s.out);
        let rules = self.cfg.rules;
        let preempts = self.preempts();
        if self.running.is_empty() || preempts || cache.window_usage().is_some() {
            // Under priority preemption, and with a window pool, every pass tries again
            // (`_get_new_batch_prefill_raw`).
            self.batch_is_full = false;
        }
        if (self.batch_is_full || self.waiting.is_empty()) && self.chunked.is_none() {
            return false;
        }
        let max_running = self.cfg.max_num_seqs as usize;
        if self.chunked.is_none() && self.running.len() >= max_running && !preempts {
            self.batch_is_full = true;
            return false;
        }
        self.order_waiting(reqs, cache);
        let mut b = Budget {
            total_offset: self.running.iter().map(|&id| self.running_reserve(&reqs[id as usize])).sum(),
            current_offset: 0.0,
            rem_input: self.cfg.max_prefill_tokens as i64,
            rem_chunk: (self.cfg.chunked_prefill_size > 0).then_some(self.cfg.chunked_prefill_size as i64),
            page: self.page(),
            page_reserve: if rules.sglang_prefill_budget_pages { self.page() } else { 0 },
            window: cache.spec().window().map(|l| l.window as u64),
            window_offset: 0.0,
        };
        let mut plan: Vec<(ReqId, u64)> = Vec::new();
        // 1. The in-progress chunked request (`add_chunked_req`).
        if let (Some(c), Some(chunk)) = (self.chunked, b.rem_chunk) {
            let r = reqs[c as usize];
            let remaining = (r.num_tokens - r.num_computed) as i64;
            let mut avail = Some(chunk);
            if b.window.is_some() {
                // `SWAPrefillBudget.available_chunk_tokens`: no room in either pool leaves the
                // chunk out of this batch.
                let by_memory = (b.remaining_total(cache).trunc() as i64)
                    .min(b.remaining_window(cache).trunc() as i64 - b.page as i64);
                avail = Some(chunk.min(by_memory)).filter(|&a| a > 0);
            } else if rules.sglang_prefill_budget_pages {
                let by_memory = b.remaining_total(cache).floor() as i64;
                if by_memory > 0 {
                    avail = Some(chunk.min(by_memory));
                }
            }
            if let Some(avail) = avail {
                let n = remaining.min(avail).max(0) as u64;
                let truncated = remaining > avail;
                b.reserve(n, if truncated { 0 } else { (r.output_len as u64).min(CLIP_MAX_NEW) });
                plan.push((c, n));
                if !truncated {
                    self.chunked = None;
                    self.prefilled.push(c);
                }
            }
        }
        // 2. Waiting requests in policy order (`add_one_req`).
        let mut taken = 0usize;
        // `PrefillAdder.req_states`, made by the pass's first `add_one_req_ignore_eos`.
        let mut states: Option<Vec<(f64, u64)>> = None;
        let mut skipped: Vec<ReqId> = Vec::new();
        let mut preempted: Vec<ReqId> = Vec::new();
        while taken < self.waiting.len() {
            if b.state(cache) == Verdict::Other {
                break;
            }
            if plan.len() >= max_running.saturating_sub(self.running.len()) {
                self.batch_is_full = true;
            }
            let id = self.waiting[taken];
            // Once the slots are full, each further candidate must preempt to be tried.
            if self.batch_is_full && !(preempts && self.preempt_to_schedule(id, &mut b, reqs, cache, &mut preempted)) {
                break;
            }
            // Under a storage tier a request whose lookup is unfinished is skipped, the later
            // ones still considered (`check_prefetch_progress`).
            if !cache.storage_ready(id, now) {
                skipped.push(id);
                taken += 1;
                continue;
            }
            let r = reqs[id as usize];
            let known = r.num_tokens as usize;
            // `init_next_round_input` matches the request against the tree; under HiCache the
            // match runs on into the host tier (`host_hit_length`).
            let t = cache.touch_tiers(r.seq, known);
            let (hit, pinned) = (t.hit, t.pinned);
            // `_prefetch_after_device_hit_loss`: a match shorter than at its lookup looks up
            // again, and the request waits.
            if cache.storage_hit_lost(id, hit + t.host) {
                cache.storage_lookup(id, r.seq, known, now, None);
                skipped.push(id);
                taken += 1;
                continue;
            }
            if let Some(p) = self.prio.as_mut() {
                p.matched(id, known as u32, hit as u32);
            }
            // The host run needs device room too: the memory check counts it as input
            // (`cand_extend_input_len`), the input and chunk budgets do not.
            let extend = (known - hit) as u64;
            let check_new =
                if rules.sglang_prefill_budget_pages { Self::remaining_new(&r) } else { r.output_len as u64 };
            let total = (extend + check_new.min(CLIP_MAX_NEW) + b.page_reserve) as f64;
            let first = plan.is_empty();
            let window_new = Self::remaining_new(&r).min(CLIP_MAX_NEW);
            let pins = (pinned, t.window_pinned, window_new);
            let shape = if r.ignore_eos && cache.spec().policy == Policy::None {
                self.admit_ignore_eos(&b, cache, reqs, id, &plan, &mut states)
            } else {
                self.admission(&b, cache, total, hit + t.host, known, pins, first)
            };
            let mut shape = match shape {
                Ok(shape) => shape,
                Err(verdict) => {
                    if verdict == Verdict::NoToken {
                        self.batch_is_full = !first || !self.running.is_empty();
                    }
                    break;
                }
            };
            if shape.0 == 0 {
                break;
            }
            // Pin the match now (loading the host run back); slots come with the whole batch's
            // allocation below.
            let Some(a) = cache.admit(id, r.seq, known, 0) else { break };
            debug_assert!(a.hit_tokens == hit || a.hit_tokens == hit + t.host, "peek and match disagree");
            if a.hit_tokens < hit + t.host {
                // The host run was not loaded (too short, or no device room): recomputed, it
                // may no longer fit (`_select_prefill_admission` again without it).
                match self.admission(&b, cache, total, hit, known, pins, first) {
                    Ok(again) if again.0 > 0 => shape = again,
                    verdict => {
                        cache.preempt(id);
                        if verdict == Err(Verdict::NoToken) {
                            self.batch_is_full = !first || !self.running.is_empty();
                        }
                        break;
                    }
                }
            }
            let (n, chunked) = shape;
            reqs[id as usize].admitted_with(a.hit_tokens, now);
            plan.push((id, n));
            taken += 1;
            b.reserve(n, if chunked { 0 } else { (r.output_len as u64).min(CLIP_MAX_NEW) });
            if chunked {
                self.chunked = Some(id);
            } else {
                self.prefilled.push(id);
            }
            match b.state(cache) {
                Verdict::Continue => {}
                Verdict::NoToken => {
                    self.batch_is_full = true;
                    break;
                }
                Verdict::Other => break,
            }
            if self.cfg.prefill_only_one_req {
                break;
            }
        }
        // `alloc_group_end`: state slots matched for requests not admitted go back.
        cache.end_admission();
        if skipped.is_empty() {
            self.waiting.drain(..taken);
        } else {
            // The skipped keep their places at the queue's head.
            let rest = self.waiting.split_off(taken);
            self.waiting = skipped;
            self.waiting.extend(rest);
        }
        // Preempted requests join the queue's end after the admitted ones left it, even when
        // none was admitted (0.5.22).
        out.preempted += preempted.len() as u32;
        for id in preempted {
            self.requeue(cache, reqs, id, now);
        }
        // `alloc_for_extend`: one allocation for the batch (evicting once; with pages above one
        // token, for a page more per request: `alloc_paged_token_slots_extend`), then each's.
        let over = if b.page > 1 { plan.len() as u64 * b.page } else { 0 };
        for &(id, _) in &plan {
            cache.slide_window(id, reqs[id as usize].num_computed as usize, false);
        }
        // `alloc_req_slots`: each request's state slots before its KV (a state pool's).
        if cache.state_usage().is_some() {
            let ids: Vec<ReqId> = plan.iter().map(|&(id, _)| id).collect();
            cache.bind_states(&ids);
        }
        cache.ensure_free(plan.iter().map(|&(_, n)| n).sum::<u64>() + over);
        for &(id, n) in &plan {
            let r = reqs[id as usize];
            if cache.grow(id, (r.num_computed as u64 + n) as usize) {
                cache.storage_admitted(id);
                out.push(id, &r, n as u32);
            } else {
                // Beyond what the budget allows (cannot happen with SGLang's budget): back to waiting.
                self.chunked = self.chunked.filter(|&c| c != id);
                self.prefilled.retain(|&x| x != id);
                cache.preempt(id);
                reqs[id as usize].preempted();
                self.waiting.insert(0, id);
            }
        }
        !out.items.is_empty()
    }

    /// `PrefillAdder.add_one_req`'s checks for a waiting request of `known` tokens whose first
    /// `prefix` are cached (on the device, or loaded from the host with it), `total` tokens its
    /// memory check counts, `first` in the batch; `pins`: of its hit the evictable full and
    /// window slots, and the outputs the window check counts. Its new tokens this step and
    /// whether it is chunked, or the verdict that stops the batch.
    #[allow(clippy::too_many_arguments)]
    fn admission(
        &self,
        b: &Budget,
        cache: &dyn PrefixCache,
        total: f64,
        prefix: usize,
        known: usize,
        pins: (u64, u64, u64),
        first: bool,
    ) -> Result<(u64, bool), Verdict> {
        let (pinned, window_pinned, window_new) = pins;
        let rules = self.cfg.rules;
        let extend = (known - prefix) as u64;
        let input = extend.div_ceil(b.page) * b.page;
        let mut chunk_limit = b.rem_chunk;
        let verdict = if !rules.sglang_truncate_to_chunk
            && (total >= b.remaining_total(cache) || (input as i64 >= b.rem_input && !first))
        {
            if total >= b.remaining_total(cache) {
                Verdict::NoToken
            } else {
                Verdict::Other
            }
        } else if total >= b.remaining_total(cache) - pinned as f64 {
            // Checked with the match pinned (`_lock_node`): its evictable part is not free.
            Verdict::NoToken
        } else if b.window.is_some() && !Self::window_fits(b, cache, input, window_pinned, window_new, &mut chunk_limit)
        {
            Verdict::NoToken
        } else if input as i64 >= b.rem_input && !first && (b.rem_chunk.is_none() || !rules.sglang_truncate_to_chunk) {
            Verdict::Other
        } else {
            Verdict::Continue
        };
        if verdict != Verdict::Continue {
            return Err(verdict);
        }
        Ok(match chunk_limit {
            Some(chunk) if input as i64 > chunk => {
                let n = if rules.sglang_truncate_to_chunk {
                    let n = chunk as u64 / b.page * b.page;
                    ((prefix as u64 + n) / b.page * b.page).saturating_sub(prefix as u64)
                } else {
                    (chunk + 1).saturating_sub(b.page as i64).max(0) as u64
                };
                (n, true)
            }
            _ => (extend, false),
        })
    }

    /// `PrefillAdder.add_one_req_ignore_eos`, SGLang's admission of a request sent with
    /// `ignore_eos` when the tree is disabled (`--disable-radix-cache`): its pages and one more
    /// must fit what is free less this pass's reservations; then, over the requests it would
    /// run with — itself, the running ones and this pass's, fewest tokens left first
    /// (`req_states`, kept for the pass) — the pool must keep more than one token per request
    /// still running when each finishes in turn (`IGNORE_EOS_RESERVE_TOKENS`; not under a
    /// window pool, whose own check stands instead). Admitted whole, or as a chunk of what the
    /// chunk budget has left.
    fn admit_ignore_eos(
        &self,
        b: &Budget,
        cache: &dyn PrefixCache,
        reqs: &[ReqRt],
        id: ReqId,
        plan: &[(ReqId, u64)],
        states: &mut Option<Vec<(f64, u64)>>,
    ) -> Result<(u64, bool), Verdict> {
        let r = &reqs[id as usize];
        let extend = (r.num_tokens - r.num_computed) as u64;
        let paged = (extend.div_ceil(b.page) + 1) * b.page;
        if paged as f64 > b.remaining_current(cache).min(b.remaining_total(cache)) {
            return Err(Verdict::NoToken);
        }
        if b.window.is_some() {
            let need = b.window_tokens(extend, Self::remaining_new(r).min(CLIP_MAX_NEW), b.rem_chunk);
            if need as f64 > b.remaining_window(cache) {
                return Err(Verdict::NoToken);
            }
        }
        // (tokens left, tokens held) of a request that has tokens left to produce.
        let state = |x: &ReqRt| {
            let ratio = if x.ignore_eos { 1.0 } else { self.ratio };
            let left = x.output_len as f64 * ratio - x.generated as f64;
            (left > 0.0).then_some((left, (x.prompt_len + x.generated) as u64))
        };
        match states {
            None => {
                let with = std::iter::once(id).chain(self.running.iter().copied()).chain(plan.iter().map(|p| p.0));
                let mut v: Vec<(f64, u64)> = with.filter_map(|x| state(&reqs[x as usize])).collect();
                v.sort_by(|p, q| p.0.total_cmp(&q.0));
                *states = Some(v);
            }
            Some(v) => {
                if let Some(s) = state(r) {
                    // The loop's index when nothing breaks it is the last one, not past it.
                    let i = v.iter().position(|x| s.0 <= x.0).unwrap_or(v.len().saturating_sub(1));
                    v.insert(i, s);
                }
            }
        }
        if b.window.is_none() {
            let v = states.as_deref().expect("made above");
            let room = b.remaining_current(cache) - paged as f64;
            let mut freed = 0.0;
            for (i, &(left, held)) in v.iter().enumerate() {
                let running = (v.len() - i) as f64;
                if room + freed - left * running <= IGNORE_EOS_RESERVE * running {
                    return Err(Verdict::NoToken);
                }
                freed += held as f64;
            }
        }
        match b.rem_chunk {
            Some(chunk) if extend as i64 > chunk => {
                if chunk <= 0 {
                    Err(Verdict::Other)
                } else {
                    Ok((chunk as u64, true))
                }
            }
            _ => Ok((extend, false)),
        }
    }

    /// `SWAPrefillBudget.check_prefill`'s window check for `input` new tokens (page-rounded) and
    /// `max_new` outputs, with `pinned` window slots of the match pinned: whether the request
    /// fits. One that could never fit the window pool whole is chunked smaller instead
    /// (`chunk_limit` lowered to what the pool holds now); a shortage that passes waits.
    fn window_fits(
        b: &Budget,
        cache: &dyn PrefixCache,
        input: u64,
        pinned: u64,
        max_new: u64,
        chunk_limit: &mut Option<i64>,
    ) -> bool {
        let remaining = b.remaining_window(cache) - pinned as f64;
        let need = b.window_tokens(input, max_new, *chunk_limit);
        if (need as f64) < remaining {
            return true;
        }
        let capacity = cache.window_usage().and_then(|u| u.capacity_tokens).expect("a window pool");
        let Some(limit) = *chunk_limit else { return false };
        if need < capacity {
            return false;
        }
        let cap = remaining.trunc() as i64 - b.window_tokens(0, max_new, None) as i64;
        let cap = cap.max(0) / b.page as i64 * b.page as i64;
        if cap <= 0 {
            return false;
        }
        *chunk_limit = Some(limit.min(cap));
        true
    }

    /// `PrefillAdder.preempt_to_schedule` for the waiting `id`: releases the running requests
    /// [`priority::Priorities::victims`] picks, as a retraction does (`release_req`: their KV
    /// not in the tree freed, their prefix unpinned, the tree evicted to 20 tokens per request
    /// left), takes their reservations off the budget and adds them to `preempted` (re-queued
    /// after the pass); new_token_ratio stays. False when none is picked.
    fn preempt_to_schedule(
        &mut self,
        id: ReqId,
        b: &mut Budget,
        reqs: &mut [ReqRt],
        cache: &mut dyn PrefixCache,
        preempted: &mut Vec<ReqId>,
    ) -> bool {
        let Some(p) = self.prio.as_ref() else { return false };
        let e = p.entry(id);
        // The candidate's figures as its last match left them (this runs before it is matched).
        let need = (f64::from(e.fill) - f64::from(e.prefix))
            + f64::from(reqs[id as usize].output_len.min(CLIP_MAX_NEW as u32))
            - b.remaining_total(cache);
        let victims = p.victims(id, &self.running, need, |v| self.running_reserve(&reqs[v as usize]));
        if victims.is_empty() {
            return false;
        }
        let n = self.running.len();
        let mut released = 0;
        for i in 0..n {
            let v = self.running[i];
            if !victims.contains(&v) {
                continue;
            }
            b.total_offset -= self.running_reserve(&reqs[v as usize]);
            released += 1;
            cache.preempt(v);
            reqs[v as usize].preempted();
            cache.ensure_free((n - released) as u64 * RETRACT_DECODE_STEPS as u64);
            preempted.push(v);
        }
        self.running.retain(|v| !victims.contains(v));
        true
    }

    /// Tokens the next decode step of `ids` allocates (a page for each request at a page end).
    fn decode_need(&self, reqs: &[ReqRt], ids: &[ReqId]) -> u64 {
        let page = self.page();
        ids.iter().filter(|&&id| (reqs[id as usize].num_computed as u64).is_multiple_of(page)).count() as u64 * page
    }

    /// `update_running_batch`: if the next decode does not fit after eviction, retracts requests
    /// (`retract_decode`) — fewest outputs first, longest prompt on ties, the later in the batch
    /// among equals — each followed by an eviction of `remaining × SGLANG_RETRACT_DECODE_STEPS`
    /// tokens, and re-estimates new_token_ratio; the kept requests stay in retraction order.
    /// Returns how many were retracted.
    fn make_decode_room(&mut self, reqs: &mut [ReqRt], cache: &mut dyn PrefixCache) -> u32 {
        let need = self.decode_need(reqs, &self.running);
        if cache.ensure_free(need) {
            return 0;
        }
        let rules = self.cfg.rules;
        let mut keep = self.running.clone();
        // Stable sort, most preferred to keep first; victims are popped from the end. Under
        // `--retraction-policy priority` the most important are kept first.
        let prio = self.prio.as_ref();
        keep.sort_by_key(|&id| {
            let r = &reqs[id as usize];
            let rank = prio.map_or(0, |p| p.retraction_rank(id));
            std::cmp::Reverse((rank, r.generated, std::cmp::Reverse(r.prompt_len)))
        });
        let mut retracted = 0;
        loop {
            if retracted > 0 {
                let short = if rules.sglang_retract_until_fits {
                    let need = self.decode_need(reqs, &keep);
                    !cache.ensure_free(need)
                } else {
                    let u = cache.usage();
                    let free = u.capacity_tokens.map_or(u64::MAX, |c| c - u.used_tokens);
                    free < keep.len() as u64 * RETRACT_DECODE_STEPS as u64
                };
                if !short {
                    break;
                }
            }
            if keep.len() <= 1 {
                break;
            }
            let victim = keep.pop().expect("more than one request");
            cache.preempt(victim);
            reqs[victim as usize].preempted();
            self.requeue(cache, reqs, victim, self.now);
            retracted += 1;
            // `release_req`: use the newly evictable memory at once.
            cache.ensure_free(keep.len() as u64 * RETRACT_DECODE_STEPS as u64);
        }
        if retracted == 0 {
            return 0;
        }
        self.running = keep;
        self.batch_is_full = false;
        let (out_sum, max_sum) = self.running.iter().fold((0u64, 0u64), |(o, m), &id| {
            let r = &reqs[id as usize];
            (o + r.generated as u64, m + r.output_len as u64)
        });
        let denominator = max_sum as f64 + if rules.sglang_retract_until_fits { 1.0 } else { 0.0 };
        self.ratio =
            ((out_sum as f64 + RETRACT_DECODE_STEPS * self.running.len() as f64) / denominator.max(1.0)).min(1.0);
        retracted
    }

    fn decode(&mut self, s: &mut Step) {
        let (reqs, cache, out) = (&mut *s.reqs, &mut *s.cache, &mut *s.out);
        if self.running.is_empty() {
            return;
        }
        let retracted = self.make_decode_room(reqs, cache);
        out.preempted += retracted;
        // `alloc_for_decode` → `maybe_evict_swa`, before the allocation's eviction.
        for &id in &self.running {
            cache.slide_window(id, reqs[id as usize].num_computed as usize, true);
        }
        let page = self.page();
        if page > 1 {
            // `alloc_paged_token_slots_decode` evicts for a page per request.
            cache.ensure_free(self.running.len() as u64 * page);
        }
        let mut i = 0;
        while i < self.running.len() {
            let id = self.running[i];
            let r = reqs[id as usize];
            if cache.grow(id, r.num_computed as usize + 1) {
                out.push(id, &r, 1);
                i += 1;
            } else {
                // Even a lone request does not fit (SGLang aborts it): retract it.
                self.running.remove(i);
                cache.preempt(id);
                reqs[id as usize].preempted();
                self.requeue(cache, reqs, id, self.now);
                out.preempted += 1;
            }
        }
        if retracted == 0 {
            self.ratio = (self.ratio - self.decay).max(self.min_ratio);
        }
    }
}

/// Whether the prefill pass may go on (SGLang `AddReqResult`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Continue,
    /// Out of memory budget: the batch is full until a request leaves.
    NoToken,
    /// Out of input or chunk budget.
    Other,
}

/// One prefill pass's budgets (SGLang `PrefillBudget`; 0.4.10's `PrefillAdder` offsets): the KV
/// budget is the live free + evictable tokens less what running requests and admitted ones
/// have reserved; the compute budgets count tokens of this pass.
struct Budget {
    total_offset: f64,
    current_offset: f64,
    rem_input: i64,
    rem_chunk: Option<i64>,
    page: u64,
    /// The page each admitted request also reserves (0 before the 2026 `PrefillBudget`).
    page_reserve: u64,
    /// A model with sliding-window layers: the window `W` (`SWAPrefillBudget`).
    window: Option<u64>,
    /// Window slots the admitted requests reserved (`swa_offset`).
    window_offset: f64,
}

impl Budget {
    fn live(cache: &dyn PrefixCache) -> f64 {
        let u = cache.usage();
        u.capacity_tokens.map_or(f64::INFINITY, |c| (c - u.used_tokens + u.evictable_tokens) as f64)
    }

    fn remaining_total(&self, cache: &dyn PrefixCache) -> f64 {
        Self::live(cache) - self.total_offset
    }

    fn remaining_current(&self, cache: &dyn PrefixCache) -> f64 {
        Self::live(cache) - self.current_offset
    }

    /// `remaining_swa`: free and evictable window slots less the reservations.
    fn remaining_window(&self, cache: &dyn PrefixCache) -> f64 {
        cache.window_usage().map_or(f64::INFINITY, |u| {
            (u.capacity_tokens.expect("a window pool is bounded") - u.used_tokens + u.evictable_tokens) as f64
                - self.window_offset
        })
    }

    /// `estimate_swa_kv_tokens`: the window slots a request of `extend` new tokens and
    /// `max_new` outputs may hold at its peak, of which at most `limit` are allocated now.
    fn window_tokens(&self, extend: u64, max_new: u64, limit: Option<i64>) -> u64 {
        let w = self.window.expect("a window pool");
        let allocated = limit.map_or(extend, |l| extend.min(l.max(0) as u64));
        allocated.saturating_sub(w) + (extend + max_new).min(w) + self.page
    }

    /// `reserve` / `_update_prefill_budget` for `n` new tokens and `max_new` outputs.
    fn reserve(&mut self, n: u64, max_new: u64) {
        let n = n.div_ceil(self.page) * self.page;
        if self.window.is_some() {
            self.window_offset += self.window_tokens(n, max_new, self.rem_chunk) as f64;
        }
        let immediate = (n + self.page_reserve) as f64;
        self.total_offset += immediate + max_new as f64;
        self.current_offset += immediate;
        self.rem_input -= n as i64;
        if let Some(c) = self.rem_chunk.as_mut() {
            *c -= n as i64;
        }
    }

    /// `budget_state`.
    fn state(&self, cache: &dyn PrefixCache) -> Verdict {
        let live = Self::live(cache);
        if live - self.total_offset <= 0.0 || live - self.current_offset <= 0.0 || self.remaining_window(cache) <= 0.0 {
            Verdict::NoToken
        } else if self.rem_input <= 0 || self.rem_chunk.is_some_and(|c| c <= 0) {
            Verdict::Other
        } else {
            Verdict::Continue
        }
    }
}

impl Sglang {
    /// Forms the next batch (`get_next_batch_to_run` after the host tier's events).
    fn form(&mut self, s: &mut Step) {
        if let Some(c) = self.chunked {
            // `stash_chunked_request`: the last chunk enters the tree; the previous prefill batch
            // shrinks by it, which clears `batch_is_full`.
            s.cache.checkpoint(c);
            self.batch_is_full = false;
        }
        if self.running.is_empty() && !self.prefilled.is_empty() {
            // The prefill batch becomes the running batch, a fresh one with the flag clear.
            self.batch_is_full = false;
        }
        self.running.append(&mut self.prefilled);
        if self.waiting.is_empty() && self.running.is_empty() && self.chunked.is_none() {
            // Idle: `on_idle` (0.4.10: `self_check_during_idle`) resets new_token_ratio.
            self.ratio = self.init_ratio;
            return;
        }
        if self.prefill(s) {
            return;
        }
        self.decode(s);
    }
}

impl Scheduler for Sglang {
    fn enqueue(&mut self, id: ReqId, priority: Option<i32>, _now: f64) {
        match self.prio.as_mut() {
            Some(p) => p.arrive(id, priority),
            // `_set_or_validate_priority` without priority scheduling.
            None if priority.is_some() && self.cfg.abort_on_priority_when_disabled => {
                self.aborted.push((id, FailReason::PriorityDisabled, priority::PRIORITY_DISABLED));
                return;
            }
            None => {}
        }
        if self.join_queue(id) {
            self.arrived.push(id);
        }
    }

    fn take_aborted(&mut self, out: &mut Vec<super::Aborted>) {
        out.append(&mut self.aborted);
    }

    fn schedule(&mut self, s: &mut Step) {
        s.out.clear();
        self.now = s.now;
        s.cache.settle();
        // The storage tier's I/O point after the last step, then the lookups of the requests
        // received since (`process_input_requests` → `_add_request_to_queue`).
        s.cache.storage_begin_pass(s.now);
        for id in std::mem::take(&mut self.arrived) {
            let r = &s.reqs[id as usize];
            s.cache.storage_lookup(id, r.seq, r.num_tokens as usize, s.now, None);
        }
        for id in self.dropped.drain(..) {
            s.cache.storage_dropped(id);
        }
        // `_process_hicache_events`: the host tier's copies before anything else, then the
        // storage tier's drain and its paced retries in queue order.
        s.cache.host_events(s.now);
        if s.cache.has_storage() {
            let mut due = Vec::new();
            s.cache.storage_due_retries(&self.waiting, &mut due);
            for (id, hit_end) in due {
                let r = &s.reqs[id as usize];
                s.cache.storage_lookup(id, r.seq, r.num_tokens as usize, s.now, hit_end);
            }
        }
        self.form(s);
        let (overlapped, blocking) = s.cache.take_host_copies();
        s.out.overlap_load_s = overlapped;
        s.out.load_s += blocking;
    }

    fn finished(&mut self, id: ReqId) {
        self.running.retain(|&x| x != id);
        self.prefilled.retain(|&x| x != id);
        self.batch_is_full = false;
        if let Some(p) = self.prio.as_mut() {
            p.forget(id);
        }
    }

    fn queued(&self) -> (usize, usize) {
        (self.waiting.len(), self.running.len() + self.prefilled.len() + self.chunked.iter().count())
    }

    fn reject_head(&mut self) -> Option<ReqId> {
        self.batch_is_full = false;
        let id = (!self.waiting.is_empty()).then(|| self.waiting.remove(0))?;
        self.dropped.push(id);
        if let Some(p) = self.prio.as_mut() {
            p.forget(id);
        }
        Some(id)
    }
}

#[cfg(test)]
mod tests;
