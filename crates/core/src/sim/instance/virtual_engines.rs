//! vLLM V0's virtual engines under pipeline parallelism (docs/engines/vllm.md#virtual-engines):
//! `LLMEngine.__init__` builds one `Scheduler` per pipeline stage, each with its own block
//! manager over `num_gpu_blocks // pipeline_parallel_size` blocks (`Scheduler.__init__`,
//! `vllm/core/scheduler.py`) and the full `max_num_seqs` / `max_num_batched_tokens` budget; a
//! new request joins the scheduler with the fewest unfinished sequence groups, the lowest index
//! on a tie (`LLMEngine._add_processed_request`); `AsyncLLMEngine.run_engine_loop` runs one
//! `engine_step(virtual_engine)` per virtual engine at once, each forming its next batch as soon
//! as its previous one has come out of the pipeline, so up to `pp` batches — one per virtual
//! engine — are in flight (vLLM 0.7.3 and the V0 engine of every release through 0.9).
//!
//! An instance with virtual engines keeps the active one's scheduler and cache in its own
//! `sched` and `cache` fields (so every rule of a one-scheduler instance applies unchanged) and
//! parks the others here; [`Instance::activate`] swaps one in before it enqueues, forms or ends a
//! batch. What the instance reports — queues, KV use, cache counters — sums over them all.

use super::Instance;
use crate::cache::{CacheSpec, CacheStats, PrefixCache, Usage};
use crate::engine::Scheduler;
use crate::workload::SeqId;
use std::collections::VecDeque;

/// A virtual engine not active now.
pub(super) struct Parked {
    sched: Box<dyn Scheduler>,
    cache: Box<dyn PrefixCache>,
}

/// The virtual engines of an instance (none without pipeline-parallel vLLM V0).
#[derive(Default)]
pub(super) struct VirtualEngines {
    /// Per virtual engine, its scheduler and cache while parked; `None` for the active one.
    parked: Vec<Option<Parked>>,
    /// The virtual engine in the instance's `sched` and `cache`.
    active: usize,
    /// The virtual engine of each batch in flight, the running one first.
    in_flight: VecDeque<usize>,
}

impl VirtualEngines {
    /// `n` virtual engines, the first active (its scheduler and cache the instance's own); the
    /// others' from `make`. None for `n` ≤ 1.
    pub(super) fn new(n: usize, mut make: impl FnMut() -> (Box<dyn Scheduler>, Box<dyn PrefixCache>)) -> Self {
        if n <= 1 {
            return Self::default();
        }
        let parked = (0..n)
            .map(|k| {
                (k > 0).then(|| {
                    let (sched, cache) = make();
                    Parked { sched, cache }
                })
            })
            .collect();
        Self { parked, active: 0, in_flight: VecDeque::new() }
    }

    /// How many there are (0: the instance has one scheduler).
    pub(super) fn len(&self) -> usize {
        self.parked.len()
    }
}

/// The cache of one virtual engine: `num_gpu_blocks // pp` blocks of the instance's pool.
pub(super) fn share(spec: CacheSpec, n: usize) -> CacheSpec {
    let block = spec.block_size.or(spec.page_size).unwrap_or(1).max(1) as u64;
    CacheSpec { capacity_tokens: spec.capacity_tokens.map(|c| c / block / n as u64 * block), ..spec }
}

impl Instance<'_> {
    /// Whether the instance runs several virtual engines.
    pub(super) fn has_virtual_engines(&self) -> bool {
        !self.ves.parked.is_empty()
    }

    /// Makes virtual engine `k` the active one (its scheduler and cache the instance's).
    pub(super) fn activate(&mut self, k: usize) {
        let v = &mut self.ves;
        if k == v.active {
            return;
        }
        let p = v.parked[k].take().expect("a parked virtual engine");
        let sched = std::mem::replace(&mut self.sched, p.sched);
        let cache = std::mem::replace(&mut self.cache, p.cache);
        v.parked[v.active] = Some(Parked { sched, cache });
        v.active = k;
    }

    /// Calls `f` with each virtual engine's scheduler and cache (the instance's own when it has
    /// none).
    fn each_engine(&self, mut f: impl FnMut(&dyn Scheduler, &dyn PrefixCache)) {
        f(self.sched.as_ref(), self.cache.as_ref());
        for p in self.ves.parked.iter().flatten() {
            f(p.sched.as_ref(), p.cache.as_ref());
        }
    }

    /// The virtual engine a request arriving now joins: the fewest unfinished requests
    /// (waiting and running), the lowest index on a tie.
    fn least_loaded(&self) -> usize {
        let unfinished = |k: usize| {
            let (w, r) = if k == self.ves.active {
                self.sched.queued()
            } else {
                self.ves.parked[k].as_ref().expect("parked").sched.queued()
            };
            w + r
        };
        (0..self.ves.len()).min_by_key(|&k| (unfinished(k), k)).unwrap_or(0)
    }

    /// Makes the virtual engine a request arriving now joins the active one.
    pub(super) fn activate_for_arrival(&mut self) {
        if self.has_virtual_engines() {
            self.activate(self.least_loaded());
        }
    }

    /// Forms the next batch on the first virtual engine without one in flight that has
    /// something to run, in index order; `form` forms it on the active engine.
    pub(super) fn begin_on_free_engine(&mut self, mut form: impl FnMut(&mut Self) -> super::Begun) -> super::Begun {
        for k in 0..self.ves.len() {
            if self.ves.in_flight.contains(&k) {
                continue;
            }
            self.activate(k);
            match form(self) {
                super::Begun::Idle => continue,
                begun => {
                    if let super::Begun::Busy(_) = begun {
                        self.ves.in_flight.push_back(k);
                    }
                    return begun;
                }
            }
        }
        super::Begun::Idle
    }

    /// Makes the virtual engine of the batch ending now the active one.
    pub(super) fn activate_ending(&mut self) {
        if let Some(k) = self.ves.in_flight.pop_front() {
            self.activate(k);
        }
    }

    /// Requests waiting and running, over every virtual engine.
    pub fn queued(&self) -> (usize, usize) {
        if !self.has_virtual_engines() {
            return self.sched.queued();
        }
        let mut q = (0, 0);
        self.each_engine(|s, _| {
            let (w, r) = s.queued();
            q = (q.0 + w, q.1 + r);
        });
        q
    }

    /// The waiting requests the engine's metric counts, over every virtual engine.
    pub fn waiting_metric(&self) -> usize {
        let mut n = 0;
        self.each_engine(|s, _| n += s.waiting_metric());
        n
    }

    /// KV use over every virtual engine's cache.
    pub fn kv_usage(&self) -> Usage {
        if !self.has_virtual_engines() {
            return self.cache.usage();
        }
        let mut u = Usage { used_tokens: 0, evictable_tokens: 0, capacity_tokens: Some(0) };
        self.each_engine(|_, c| {
            let x = c.usage();
            u.used_tokens += x.used_tokens;
            u.evictable_tokens += x.evictable_tokens;
            u.capacity_tokens = u.capacity_tokens.zip(x.capacity_tokens).map(|(a, b)| a + b);
        });
        u
    }

    /// Prompt tokens a request arriving now would reuse: from the cache of the virtual engine
    /// it would join.
    pub fn peek(&self, seq: SeqId, known: usize) -> usize {
        if !self.has_virtual_engines() {
            return self.cache.peek(seq, known);
        }
        let k = self.least_loaded();
        if k == self.ves.active {
            self.cache.peek(seq, known)
        } else {
            self.ves.parked[k].as_ref().expect("parked").cache.peek(seq, known)
        }
    }

    /// Starts logging KV events in every virtual engine's cache ([`PrefixCache::log_kv_events`]).
    pub fn log_kv_events(&mut self) -> bool {
        let mut logs = self.cache.log_kv_events();
        for p in self.ves.parked.iter_mut().flatten() {
            logs &= p.cache.log_kv_events();
        }
        logs
    }

    /// Moves every virtual engine's KV events logged since the last call into `out`.
    pub fn take_kv_events(&mut self, out: &mut Vec<(u32, bool)>) {
        self.cache.take_kv_events(out);
        for p in self.ves.parked.iter_mut().flatten() {
            p.cache.take_kv_events(out);
        }
    }

    /// The cache counters of this life, over every virtual engine (the peak is the sum of
    /// their peaks: an upper bound on the instance's).
    pub(super) fn live_cache_stats(&self) -> CacheStats {
        let mut s = CacheStats::default();
        self.each_engine(|_, c| {
            let x = c.stats();
            s.evicted_tokens += x.evicted_tokens;
            s.peak_used_tokens += x.peak_used_tokens;
            s.partial_block_waste_tokens += x.partial_block_waste_tokens;
        });
        s
    }
}
