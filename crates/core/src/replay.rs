//! Cache-only replay (`cachesim cache`): requests in arrival order through a prefix cache,
//! without timing. At most `inflight` requests hold their KV at once; a request is admitted
//! (prefix matched and pinned, prompt computed), and when it leaves the window its output is
//! generated in one go (KV grown to prompt + output − 1), then it finishes. A turn waits for
//! its session's previous turn to finish. When memory is short the oldest in-flight request
//! finishes first; when a finishing request cannot grow, the youngest other one is preempted
//! (the engines' victim) and admitted again later. Many (policy, capacity) runs go in parallel.
//!
//! Under the paged cache a host tier may sit below the GPU ([`ReplaySpec::host_tokens`]): vLLM's
//! CPU offloading connector ([`Connector`]) as a run drives it, with copies that take no time — a
//! request looks past its GPU hit for chunks the host holds and loads them, its full prompt
//! chunks are stored after it is computed, and it is re-ranked in the host's LRU when it
//! finishes — so the replay says how much host memory buys how much hit ratio. With
//! [`ReplaySpec::lmcache_chunk`] the tier is LMCache's CPU backend instead ([`Lmcache`]): chunks of
//! that many tokens, looked up past the GPU hit, loaded, and saved after the prompt is computed.

use crate::cache::{CacheSpec, Policy, PrefixCache, ReqId};
use crate::engine::vllm_offload::lmcache::Lmcache;
use crate::engine::vllm_offload::{Connector, Lookup, OffloadBackend, OffloadConfig, OffloadStats};
use crate::engine::ReqRt;
use crate::workload::Workload;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::VecDeque;

/// One replay: a cache and, under the paged cache, a host tier below it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplaySpec {
    pub cache: CacheSpec,
    /// Host tier capacity in tokens — vLLM's CPU offloading (chunks of one block) under the
    /// paged cache, SGLang's HiCache (`write_through`) under the radix cache; `None`: none.
    pub host_tokens: Option<u64>,
    /// Under the paged cache: the host tier is LMCache's CPU backend with chunks of this many
    /// tokens (a whole number of blocks) instead of vLLM's own; `None`: vLLM's.
    pub lmcache_chunk: Option<u32>,
    /// Under LMCache's CPU backend: its local disk backend, in tokens (whole chunks); `None`: none.
    pub disk_tokens: Option<u64>,
}

impl From<CacheSpec> for ReplaySpec {
    fn from(cache: CacheSpec) -> Self {
        Self { cache, host_tokens: None, lmcache_chunk: None, disk_tokens: None }
    }
}

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
    /// The host tier's capacity in tokens (absent without one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_capacity_tokens: Option<u64>,
    /// Of `hit_tokens`, those loaded from the host tier at first admissions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_hit_tokens: Option<u64>,
    /// host_hit_tokens / prompt_tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_hit_ratio: Option<f64>,
    /// Tokens of the chunks the host tier evicted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_evicted_tokens: Option<u64>,
    /// LMCache's local disk capacity in tokens (absent without one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_capacity_tokens: Option<u64>,
    /// Of `host_hit_tokens`, those read from the disk (chunks the CPU backend no longer held) at
    /// the admissions that stood.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_hit_tokens: Option<u64>,
    /// disk_hit_tokens / prompt_tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_hit_ratio: Option<f64>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Status {
    Waiting,
    Running,
    Done,
}

/// The connector a replay's host tier runs.
enum HostConn {
    Native(Connector),
    Lmcache(Lmcache),
}

/// The host tier of a replay: the connector, the requests as it reads them, and a clock that
/// advances one second a call so every copy has ended by the next.
struct Host {
    conn: HostConn,
    rt: Vec<ReqRt>,
    now: f64,
}

/// A first admission's hit: tokens the GPU held, tokens loaded from the host tier, and of those
/// the ones read from LMCache's disk.
#[derive(Clone, Copy)]
struct Hits {
    gpu: usize,
    host: usize,
    disk: usize,
}

impl Hits {
    fn of(gpu: usize, host: usize) -> Self {
        Hits { gpu, host, disk: 0 }
    }
}

impl Host {
    /// The connector's step boundary: what was submitted starts (and, taking no time, ends);
    /// the next step sees it.
    fn tick(&mut self) {
        match &mut self.conn {
            HostConn::Native(c) => {
                c.priced(self.now, None);
                self.now += 1.0;
                c.begin(self.now);
            }
            HostConn::Lmcache(l) => {
                l.priced(self.now, None);
                self.now += 1.0;
            }
        }
    }

    /// Request `i`'s prompt of `prompt` tokens is computed: its full prompt chunks are offered
    /// for storing (vLLM's) or saved (LMCache's).
    fn computed(&mut self, i: ReqId, prompt: u32, cache: &dyn PrefixCache) {
        let from = self.rt[i as usize].num_computed;
        match &mut self.conn {
            HostConn::Native(c) => {
                c.plan_stores(&[(i, prompt - from)], &self.rt, cache);
            }
            HostConn::Lmcache(l) => {
                l.save(&[(i, prompt - from)], &self.rt, cache, self.now);
            }
        }
        self.rt[i as usize].num_computed = prompt;
        self.tick();
    }

    /// Request `i` finished: vLLM's connector offers its remaining prompt chunks and re-ranks
    /// its accesses; LMCache drops its tracker.
    fn finished(&mut self, i: ReqId, cache: &dyn PrefixCache) {
        match &mut self.conn {
            HostConn::Native(c) => {
                c.finished(i);
                c.plan_stores(&[], &self.rt, cache);
            }
            HostConn::Lmcache(l) => l.finished(i),
        }
        self.tick();
    }

    fn config(&self) -> OffloadConfig {
        match &self.conn {
            HostConn::Native(c) => c.config(),
            HostConn::Lmcache(l) => l.config(),
        }
    }

    fn stats(&self) -> OffloadStats {
        match &self.conn {
            HostConn::Native(c) => c.stats(),
            HostConn::Lmcache(l) => l.stats(),
        }
    }

    fn check_invariants(&self) {
        match &self.conn {
            HostConn::Native(c) => c.check_invariants(),
            HostConn::Lmcache(l) => l.check_invariants(),
        }
    }
}

struct Run<'a> {
    w: &'a Workload,
    cache: Box<dyn PrefixCache>,
    host: Option<Host>,
    status: Vec<Status>,
    inflight: VecDeque<ReqId>,
    readmit: VecDeque<ReqId>,
    hit_tokens: u64,
    host_hit_tokens: u64,
    disk_hit_tokens: u64,
    prompt_tokens: u64,
    ratio_sum: f64,
    requests: u64,
    preemptions: u64,
    unfit: u64,
    /// The radix cache's host tier's clock: one second per admission.
    hicache_clock: f64,
}

impl Run<'_> {
    /// Admits `i`, finishing the oldest in-flight requests while memory is short.
    /// Returns its [`Hits`], or `None` when the prompt does not fit even in an empty
    /// window.
    fn admit(&mut self, i: ReqId) -> Option<Hits> {
        let r = self.w.requests[i as usize];
        let prompt = r.prompt_len as usize;
        loop {
            if let Some(hits) = self.try_admit(i) {
                self.cache.computed(i, prompt);
                if let Some(h) = self.host.as_mut() {
                    h.computed(i, r.prompt_len, self.cache.as_ref());
                }
                self.status[i as usize] = Status::Running;
                self.inflight.push_back(i);
                return Some(hits);
            }
            match self.inflight.front() {
                Some(&oldest) => self.finish(oldest),
                None => return None,
            }
        }
    }

    /// One admission attempt of `i` with its whole prompt: its [`Hits`], or `None` (and
    /// nothing held) when memory is short. With a host tier the request first looks past its GPU
    /// hit for chunks the host holds, loads them, and is then grown to its prompt.
    fn try_admit(&mut self, i: ReqId) -> Option<Hits> {
        let r = self.w.requests[i as usize];
        let prompt = r.prompt_len as usize;
        let Some(h) = self.host.as_mut() else {
            // A radix cache's own host tier: its writes acknowledged at each admission (they
            // take no time), and what the admission loaded counted as the host's.
            self.hicache_clock += 1.0;
            self.cache.host_events(self.hicache_clock);
            let loaded = |c: &dyn PrefixCache| c.host_tier_stats().map_or(0, |s| s.loaded_tokens as usize);
            let before = loaded(self.cache.as_ref());
            let a = self.cache.admit(i, r.seq, prompt, usize::MAX)?;
            let host = loaded(self.cache.as_ref()) - before;
            return Some(Hits::of(a.hit_tokens - host, host));
        };
        let req = h.rt[i as usize];
        let conn = match &mut h.conn {
            HostConn::Native(c) => c,
            HostConn::Lmcache(l) => {
                // No chunk held: the usual admission, whatever the GPU holds.
                let hit = l.lookup(i, &req, self.cache.as_ref(), h.now);
                let gpu = if hit == 0 { 0 } else { self.cache.peek(r.seq, prompt) };
                let ext = if hit == 0 { 0 } else { Lmcache::need(hit, gpu, req.num_tokens) };
                if ext == 0 {
                    let a = self.cache.admit(i, r.seq, prompt, usize::MAX)?;
                    l.admitted(i, a.hit_tokens, 0, h.now);
                    h.rt[i as usize].num_computed = a.hit_tokens as u32;
                    return Some(Hits::of(a.hit_tokens, 0));
                }
                // Loaded at admission, counted computed at once, then the rest of the prompt.
                let a = self.cache.admit_external(i, r.seq, prompt, ext, 0)?;
                debug_assert_eq!(a.hit_tokens, gpu, "the cache's hit moved under the lookup");
                self.cache.loaded(i, gpu + ext);
                let read = |l: &Lmcache| l.stats().disk.map_or(0, |d| d.hit_tokens);
                let before = read(l);
                l.admitted(i, gpu, ext, h.now);
                let disk = (read(l) - before) as usize;
                return grown(self.cache.as_mut(), h, i, prompt, gpu + ext).then_some(Hits { gpu, host: ext, disk });
            }
        };
        let gpu = self.cache.peek(r.seq, prompt);
        let ext = match conn.lookup(i, &req, gpu, self.cache.as_ref()) {
            Lookup::Load(n) => n,
            Lookup::Defer => {
                debug_assert!(false, "every copy ends before the next lookup");
                0
            }
        };
        if ext == 0 {
            let a = self.cache.admit(i, r.seq, prompt, usize::MAX)?;
            h.rt[i as usize].num_computed = 0;
            return Some(Hits::of(a.hit_tokens, 0));
        }
        let a = self.cache.admit_external(i, r.seq, prompt, ext, 0)?;
        debug_assert_eq!(a.hit_tokens, gpu, "the cache's hit moved under the lookup");
        conn.start_load(i, &req, gpu, ext, self.cache.as_ref());
        h.tick();
        let HostConn::Native(conn) = &mut h.conn else { unreachable!("matched above") };
        let (computed, _) = conn.land(i, &req, self.cache.as_mut());
        grown(self.cache.as_mut(), h, i, prompt, computed as usize).then_some(Hits::of(gpu, ext))
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
            if let Some(h) = self.host.as_mut() {
                h.rt[victim as usize].preempted();
            }
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
        if let Some(h) = self.host.as_mut() {
            h.finished(i, self.cache.as_ref());
        }
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
            Some(Hits { gpu, host, disk }) => {
                let hit = (gpu + host) as u64;
                self.hit_tokens += hit;
                self.host_hit_tokens += host as u64;
                self.disk_hit_tokens += disk as u64;
                self.ratio_sum += hit as f64 / prompt.max(1) as f64;
            }
            None => {
                self.unfit += 1;
                self.status[i as usize] = Status::Done;
            }
        }
    }
}

/// Request `i`, its load landed with `computed` tokens counted computed, grows to its prompt of
/// `prompt` tokens; false when the prompt does not fit beside what it loaded (it gives its blocks
/// back).
fn grown(cache: &mut dyn PrefixCache, h: &mut Host, i: ReqId, prompt: usize, computed: usize) -> bool {
    h.rt[i as usize].num_computed = computed as u32;
    if cache.grow(i, prompt) {
        return true;
    }
    cache.preempt(i);
    h.rt[i as usize].preempted();
    false
}

/// The host tier of `spec` under the paged cache: vLLM's connector over chunks of one block, or
/// LMCache's CPU backend over its chunks, copies taking no time. (Under the radix cache the tier
/// is the cache's own: [`attach_hicache`].)
fn host_tier(w: &Workload, spec: &ReplaySpec) -> Option<Host> {
    let tokens = spec.host_tokens.filter(|_| spec.cache.policy != Policy::Radix)?;
    assert_eq!(spec.cache.policy, Policy::Paged, "a host tier sits under the paged or the radix cache");
    let block = spec.cache.block_size.unwrap_or(16).max(1);
    let (backend, chunk) = match spec.lmcache_chunk {
        Some(c) => (OffloadBackend::Lmcache, c),
        None => (OffloadBackend::Native, block),
    };
    assert!(chunk.is_multiple_of(block), "an LMCache chunk is whole blocks (checked by the caller)");
    let cfg = OffloadConfig {
        backend,
        size_gib: 0.0,
        chunks: tokens / chunk as u64,
        chunk_tokens: chunk,
        block_tokens: block,
        chunk_bytes_per_rank: 1,
        link_bytes_per_s: f64::INFINITY,
        // LMCache's disk, its reads and writes taking no time.
        disk: spec.disk_tokens.filter(|&t| backend == OffloadBackend::Lmcache && t >= chunk as u64).map(|t| {
            crate::engine::vllm_offload::DiskConfig {
                size_gib: 0.0,
                chunks: t / chunk as u64,
                bytes_per_s: f64::INFINITY,
            }
        }),
        remote: None,
    };
    let rt = w.requests.iter().map(|r| ReqRt::new(r.seq, r.prompt_len, r.output_len)).collect();
    let conn = match backend {
        OffloadBackend::Native => HostConn::Native(Connector::new(cfg)),
        OffloadBackend::Lmcache => HostConn::Lmcache(Lmcache::new(cfg)),
    };
    Some(Host { conn, rt, now: 0.0 })
}

/// Puts SGLang's HiCache under a radix cache (`write_through`, copies taking no time), when
/// `spec` asks for a host tier there.
fn attach_hicache(cache: &mut dyn PrefixCache, spec: &ReplaySpec) {
    if let Some(host_tokens) = spec.host_tokens.filter(|_| spec.cache.policy == Policy::Radix) {
        let cfg = crate::cache::hicache::HostTierConfig {
            policy: crate::cache::hicache::WritePolicy::WriteThrough,
            host_tokens,
            token_bytes_per_rank: 1,
            link_bytes_per_s: f64::INFINITY,
        };
        assert!(cache.attach_host_tier(cfg), "the radix cache takes a host tier");
    }
}

/// Replays the whole workload through one cache (and host tier); `tick` is called once per
/// request.
pub fn replay(
    w: &Workload,
    spec: impl Into<ReplaySpec>,
    opts: ReplayOptions,
    tick: &(dyn Fn() + Sync),
) -> ReplayResult {
    let spec = spec.into();
    let n = w.requests.len();
    let mut cache = spec.cache.build(w.store.clone());
    attach_hicache(cache.as_mut(), &spec);
    let mut run = Run {
        w,
        cache,
        host: host_tier(w, &spec),
        status: vec![Status::Waiting; n],
        inflight: VecDeque::new(),
        readmit: VecDeque::new(),
        hit_tokens: 0,
        host_hit_tokens: 0,
        disk_hit_tokens: 0,
        prompt_tokens: 0,
        ratio_sum: 0.0,
        requests: 0,
        preemptions: 0,
        unfit: 0,
        hicache_clock: 0.0,
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
        if let Some(h) = &run.host {
            h.check_invariants();
        }
    }
    let stats = run.cache.stats();
    // The tier's capacity and evicted tokens: the connector's chunks and their tokens, or the
    // radix cache's own tier.
    let host: Option<(u64, u64)> = match (&run.host, run.cache.host_tier_stats()) {
        (Some(h), _) => {
            let (c, s) = (h.config(), h.stats());
            Some((c.chunks * c.chunk_tokens as u64, s.tier.evicted_chunks * c.chunk_tokens as u64))
        }
        (None, Some(s)) => Some((spec.host_tokens.unwrap_or(0), s.host_evicted_tokens)),
        (None, None) => None,
    };
    // LMCache's disk: its whole chunks (none below one chunk).
    let disk_tokens = match &run.host {
        Some(h) if spec.disk_tokens.is_some() => {
            let c = h.config();
            Some(c.disk.map_or(0, |d| d.chunks * c.chunk_tokens as u64))
        }
        _ => None,
    };
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
        host_capacity_tokens: host.map(|(capacity, _)| capacity),
        host_hit_tokens: host.map(|_| run.host_hit_tokens),
        host_hit_ratio: host.map(|_| run.host_hit_tokens as f64 / run.prompt_tokens.max(1) as f64),
        host_evicted_tokens: host.map(|(_, evicted)| evicted),
        disk_capacity_tokens: disk_tokens,
        disk_hit_tokens: disk_tokens.map(|_| run.disk_hit_tokens),
        disk_hit_ratio: disk_tokens.map(|_| run.disk_hit_tokens as f64 / run.prompt_tokens.max(1) as f64),
    }
}

/// Replays every spec in parallel; results come back in the order of `specs`.
pub fn replay_all<S: Into<ReplaySpec> + Copy + Sync>(
    w: &Workload,
    specs: &[S],
    opts: ReplayOptions,
    tick: &(dyn Fn() + Sync),
) -> Vec<ReplayResult> {
    specs.par_iter().map(|&s| replay(w, s, opts, tick)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A, then B, then A again, one at a time, through a GPU of two 4-token blocks: B evicts
    /// A's blocks from the GPU. A host of four chunks still holds them (A's resend loads its 8
    /// tokens: 8 of 24 prompt tokens hit, all from the host); a host of two evicted them for B's
    /// (its LRU: A finished first), and B's for A's again; no host, or one of no chunk, hits
    /// nothing.
    #[test]
    fn a_host_tier_keeps_what_the_gpu_evicted() {
        let a: Vec<u32> = (0..8).collect();
        let w = crate::sim::tests::workload(&[(a.clone(), 1), ((100..108).collect(), 1), (a, 1)]);
        let gpu = CacheSpec {
            policy: Policy::Paged,
            block_size: Some(4),
            page_size: None,
            capacity_tokens: Some(8),
            hybrid: None,
            sglang_pool: None,
        };
        let run = |host_tokens| {
            let spec = ReplaySpec { cache: gpu, host_tokens, lmcache_chunk: None, disk_tokens: None };
            replay(&w, spec, ReplayOptions::default(), &|| ())
        };
        let hits = |r: ReplayResult| (r.hit_tokens, r.host_hit_tokens, r.host_evicted_tokens);
        assert_eq!(hits(run(None)), (0, None, None));
        assert_eq!(hits(run(Some(0))), (0, Some(0), Some(0)));
        assert_eq!(hits(run(Some(8))), (0, Some(0), Some(16)));
        let r = run(Some(16));
        assert_eq!(hits(r), (8, Some(8), Some(0)));
        assert_eq!((r.prompt_tokens, r.host_capacity_tokens, r.host_hit_ratio), (24, Some(16), Some(1.0 / 3.0)));
        // LMCache in 8-token chunks: A's one chunk saved, evicted by B's from a one-chunk tier;
        // kept in a two-chunk one, where A again hits every token and so loads one fewer (the
        // last is computed), and saves nothing (its chunk is held).
        let lm_disk = |host_tokens, disk_tokens| {
            let spec = ReplaySpec { cache: gpu, host_tokens, lmcache_chunk: Some(8), disk_tokens };
            replay(&w, spec, ReplayOptions::default(), &|| ())
        };
        let lm = |host_tokens| lm_disk(host_tokens, None);
        assert_eq!(hits(lm(Some(8))), (0, Some(0), Some(16)));
        let r = lm(Some(16));
        assert_eq!(hits(r), (7, Some(7), Some(0)));
        assert_eq!((r.host_capacity_tokens, r.disk_capacity_tokens, r.disk_hit_tokens), (Some(16), None, None));
        // A one-chunk CPU backend over a two-chunk disk: A's chunk, written through to the disk
        // and evicted from the CPU by B's, is read back from the disk for A's second turn — the
        // same 7 tokens as the two-chunk CPU backend, all of them from the disk. A disk of less
        // than a chunk holds nothing.
        let r = lm_disk(Some(8), Some(16));
        assert_eq!(hits(r), (7, Some(7), Some(16)));
        assert_eq!(
            (r.disk_capacity_tokens, r.disk_hit_tokens, r.disk_hit_ratio),
            (Some(16), Some(7), Some(7.0 / 24.0))
        );
        let r = lm_disk(Some(8), Some(7));
        assert_eq!((hits(r), r.disk_capacity_tokens, r.disk_hit_tokens), ((0, Some(0), Some(16)), Some(0), Some(0)));
    }
}
