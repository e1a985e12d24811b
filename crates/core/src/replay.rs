//! Cache-only replay (`cachesim cache`): requests in arrival order through a prefix cache,
//! without timing. At most `inflight` requests hold their KV at once; a request is admitted
//! (prefix matched and pinned, prompt computed), and when it leaves the window its output is
//! generated in one go (KV grown to prompt + output − 1), then it finishes. A turn waits for
//! its session's previous turn to finish. When memory is short the oldest in-flight request
//! finishes first; when a finishing request cannot grow, the youngest other one is preempted
//! (the engines' victim) and admitted again later. Many (policy, capacity) runs go in parallel.

use crate::cache::{CacheSpec, PrefixCache, ReqId};
use crate::workload::Workload;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::VecDeque;

/// Options of a replay.
#[derive(Debug, Clone, Copy)]
pub struct ReplayOptions {
    /// Requests holding KV at once (≥ 1).
    pub inflight: usize,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self { inflight: 1 }
    }
}

/// The outcome of one replay; field names are the `--json` keys.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ReplayResult {
    pub policy: &'static str,
    pub block_size: Option<u32>,
    pub page_size: Option<u32>,
    /// `None` = unlimited.
    pub capacity_tokens: Option<u64>,
    pub inflight: usize,
    /// Requests replayed (unfit ones included).
    pub requests: u64,
    /// Prompt tokens of every request (unfit ones count as misses).
    pub prompt_tokens: u64,
    /// Prompt tokens served from the cache at each request's first admission.
    pub hit_tokens: u64,
    /// hit_tokens / prompt_tokens.
    pub hit_ratio: f64,
    /// Mean over requests of hit / prompt.
    pub mean_request_hit_ratio: f64,
    pub evicted_tokens: u64,
    pub peak_used_tokens: u64,
    /// Paged only: Σ unused slots in requests' last blocks.
    pub partial_block_waste_tokens: Option<u64>,
    pub preemptions: u64,
    /// Requests whose prompt (or prompt + output) never fit the capacity.
    pub unfit_requests: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Status {
    Waiting,
    Running,
    Done,
}

struct Run<'a> {
    w: &'a Workload,
    cache: Box<dyn PrefixCache>,
    status: Vec<Status>,
    inflight: VecDeque<ReqId>,
    readmit: VecDeque<ReqId>,
    hit_tokens: u64,
    prompt_tokens: u64,
    ratio_sum: f64,
    requests: u64,
    preemptions: u64,
    unfit: u64,
}

impl Run<'_> {
    /// Admits `i`, finishing the oldest in-flight requests while memory is short.
    /// Returns the hit, or `None` when the prompt does not fit even in an empty window.
    fn admit(&mut self, i: ReqId) -> Option<usize> {
        let r = self.w.requests[i as usize];
        loop {
            if let Some(a) = self.cache.admit(i, r.seq, r.prompt_len as usize, usize::MAX) {
                self.cache.computed(i, r.prompt_len as usize);
                self.status[i as usize] = Status::Running;
                self.inflight.push_back(i);
                return Some(a.hit_tokens);
            }
            match self.inflight.front() {
                Some(&oldest) => self.finish(oldest),
                None => return None,
            }
        }
    }

    /// Generates `i`'s output and finishes it; preempts younger requests if it cannot grow.
    fn finish(&mut self, i: ReqId) {
        let r = self.w.requests[i as usize];
        let total = r.final_kv_tokens();
        let mut grown = self.cache.grow(i, total);
        while !grown {
            let Some(pos) = self.inflight.iter().rposition(|&j| j != i) else { break };
            let victim = self.inflight.remove(pos).expect("position found");
            self.cache.preempt(victim);
            self.status[victim as usize] = Status::Waiting;
            self.readmit.push_front(victim);
            self.preemptions += 1;
            grown = self.cache.grow(i, total);
        }
        if grown {
            self.cache.computed(i, total);
        } else {
            self.unfit += 1;
        }
        self.cache.finish(i);
        self.status[i as usize] = Status::Done;
        self.inflight.retain(|&j| j != i);
    }

    fn drain_readmits(&mut self) {
        while let Some(j) = self.readmit.pop_front() {
            if self.admit(j).is_none() {
                self.unfit += 1;
                self.status[j as usize] = Status::Done;
            }
        }
    }

    fn step(&mut self, i: ReqId, window: usize) {
        self.drain_readmits();
        if let Some(p) = self.w.requests[i as usize].prev_turn {
            if self.status[p as usize] == Status::Running {
                self.finish(p);
                self.drain_readmits();
            }
        }
        while self.inflight.len() >= window {
            let oldest = self.inflight[0];
            self.finish(oldest);
            self.drain_readmits();
        }
        let prompt = self.w.requests[i as usize].prompt_len as u64;
        self.prompt_tokens += prompt;
        self.requests += 1;
        match self.admit(i) {
            Some(hit) => {
                self.hit_tokens += hit as u64;
                self.ratio_sum += hit as f64 / prompt.max(1) as f64;
            }
            None => {
                self.unfit += 1;
                self.status[i as usize] = Status::Done;
            }
        }
    }
}

/// Replays the whole workload through one cache; `tick` is called once per request.
pub fn replay(w: &Workload, spec: CacheSpec, opts: ReplayOptions, tick: &(dyn Fn() + Sync)) -> ReplayResult {
    let n = w.requests.len();
    let mut run = Run {
        w,
        cache: spec.build(w.store.clone()),
        status: vec![Status::Waiting; n],
        inflight: VecDeque::new(),
        readmit: VecDeque::new(),
        hit_tokens: 0,
        prompt_tokens: 0,
        ratio_sum: 0.0,
        requests: 0,
        preemptions: 0,
        unfit: 0,
    };
    let window = opts.inflight.max(1);
    for i in 0..n as ReqId {
        run.step(i, window);
        tick();
    }
    loop {
        run.drain_readmits();
        match run.inflight.front() {
            Some(&oldest) => run.finish(oldest),
            None => break,
        }
    }
    debug_assert!(run.readmit.is_empty());
    if cfg!(debug_assertions) {
        run.cache.check_invariants();
    }
    let stats = run.cache.stats();
    let spec = run.cache.spec();
    ReplayResult {
        policy: spec.policy.name(),
        block_size: spec.block_size,
        page_size: spec.page_size,
        capacity_tokens: spec.capacity_tokens,
        inflight: window,
        requests: run.requests,
        prompt_tokens: run.prompt_tokens,
        hit_tokens: run.hit_tokens,
        hit_ratio: run.hit_tokens as f64 / run.prompt_tokens.max(1) as f64,
        mean_request_hit_ratio: run.ratio_sum / run.requests.max(1) as f64,
        evicted_tokens: stats.evicted_tokens,
        peak_used_tokens: stats.peak_used_tokens,
        partial_block_waste_tokens: spec.block_size.map(|_| stats.partial_block_waste_tokens),
        preemptions: run.preemptions,
        unfit_requests: run.unfit,
    }
}

/// Replays every spec in parallel; results come back in the order of `specs`.
pub fn replay_all(
    w: &Workload,
    specs: &[CacheSpec],
    opts: ReplayOptions,
    tick: &(dyn Fn() + Sync),
) -> Vec<ReplayResult> {
    specs.par_iter().map(|&s| replay(w, s, opts, tick)).collect()
}
