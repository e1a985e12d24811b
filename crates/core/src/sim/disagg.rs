//! The prefill → decode hand-off of a disaggregated deployment (rules and their sources in
//! [`crate::cluster::pd`]): the decode instance's allocation queue, the KV link's FIFO lanes,
//! and the landing of a request's KV on its decode instance. Prefill instances are
//! `0..prefill`, decode instances `prefill..`; the decode router sees only the decode pool.

use super::instance::Instance;
use super::pool::{Dirty, View};
use crate::cache::ReqId;
use crate::cluster::pd::{KvLink, PdConfig, PdStyle, PdTimes};
use crate::cluster::router::{Arrival, Router};
use crate::engine::ReqRt;
use crate::workload::Workload;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// A disaggregated deployment: the first `cfg.prefill` instances prefill, the rest decode.
pub struct Pd<'r> {
    pub cfg: PdConfig,
    /// KV bytes per token moved over the link (all layers, all ranks).
    pub kv_bytes_per_token: u64,
    /// Picks the decode instance.
    pub decode_router: &'r mut dyn Router,
}

/// What a hand-off works on: the workload, the time, the instances, the requests' state and
/// the instances to schedule.
pub(super) struct Ctx<'c, 'a> {
    pub w: &'c Workload,
    pub now: f64,
    pub inst: &'c mut [Instance<'a>],
    pub rt: &'c mut [ReqRt],
    pub dirty: &'c mut Dirty,
}

pub(super) struct Disagg<'r> {
    style: PdStyle,
    link: KvLink,
    kv_bytes_per_token: u64,
    decode_router: &'r mut dyn Router,
    /// First decode instance.
    prefill: usize,
    /// When each lane is free next.
    lanes: Vec<f64>,
    /// Per decode instance: requests waiting for its allocation, FIFO.
    waiting: Vec<VecDeque<ReqId>>,
    /// Per decode instance: allocations held for requests whose KV has not landed.
    holding: Vec<u32>,
    /// Per request: its decode instance holds an allocation for it that has not landed.
    held: Vec<bool>,
    /// Per prefill instance: requests sent to it whose KV has not landed on their decode
    /// instance (nor failed); per request: counted there.
    pending: Vec<u32>,
    on_prefill: Vec<bool>,
    /// Transfers in flight: (end bits, FIFO, request).
    transfers: BinaryHeap<Reverse<(u64, u64, ReqId)>>,
    fifo: u64,
    /// The outputs each request generates on its decode instance.
    output_len: Vec<u32>,
    times: Vec<PdTimes>,
}

impl<'r> Disagg<'r> {
    pub fn new(pd: Pd<'r>, prefill: usize, instances: usize, requests: usize) -> Self {
        Disagg {
            style: pd.cfg.style,
            link: pd.cfg.link,
            kv_bytes_per_token: pd.kv_bytes_per_token,
            decode_router: pd.decode_router,
            prefill,
            lanes: vec![0.0; pd.cfg.link.links as usize],
            waiting: vec![VecDeque::new(); instances - prefill],
            holding: vec![0; instances - prefill],
            held: vec![false; requests],
            pending: vec![0; prefill],
            on_prefill: vec![false; requests],
            transfers: BinaryHeap::new(),
            fifo: 0,
            output_len: vec![0; requests],
            times: vec![PdTimes::default(); requests],
        }
    }

    /// The request timelines, by request id.
    pub fn into_times(self) -> Vec<PdTimes> {
        self.times
    }

    /// Whether instance `i` may reject a request that does not fit it idle: not while it holds
    /// memory for hand-offs still to land (that memory frees when they do).
    pub fn may_reject(&self, i: usize) -> bool {
        i < self.prefill || self.holding[i - self.prefill] == 0
    }

    /// The router that picks decode instances (indices within the decode pool).
    pub fn decode_router_mut(&mut self) -> &mut dyn Router {
        &mut *self.decode_router
    }

    /// Whether instance `i` owes nothing to a request beyond its own queues: a prefill instance
    /// whose requests have all landed on their decode instances (their blocks freed) or failed;
    /// a decode instance with no hand-off waiting for its memory and no allocation held for KV
    /// still to land. A draining instance stops only then.
    pub fn quiet(&self, i: usize) -> bool {
        if i < self.prefill {
            self.pending[i] == 0
        } else {
            self.waiting[i - self.prefill].is_empty() && self.holding[i - self.prefill] == 0
        }
    }

    /// Request `id` no longer holds anything on its prefill instance.
    fn off_prefill(&mut self, id: ReqId) {
        if std::mem::take(&mut self.on_prefill[id as usize]) {
            self.pending[self.times[id as usize].prefill_instance as usize] -= 1;
        }
    }

    /// The next transfer end.
    pub fn next_event(&self) -> Option<f64> {
        self.transfers.peek().map(|&Reverse((bits, _, _))| f64::from_bits(bits))
    }

    /// Picks request `id`'s decode instance and queues it for that instance's allocation.
    fn hand_to_decode(&mut self, id: ReqId, c: &mut Ctx) -> Vec<ReqId> {
        let q = &c.w.requests[id as usize];
        let a = Arrival::of(id, q, &c.w.store, c.now);
        let d = self.decode_router.route(&a, &View(&c.inst[self.prefill..], c.rt)).instance;
        self.times[id as usize].decode_instance = d as u32;
        c.inst[self.prefill + d].stats.requests += 1;
        self.waiting[d].push_back(id);
        self.allocate(d, c)
    }

    /// Request `id` reached prefill instance `p`: it prefills with one output (the rest are the
    /// decode instance's). SGLang: the decode instance is picked now and must pre-allocate
    /// before the prefill may start. Returns requests that can never fit a decode instance.
    pub fn arrive(&mut self, id: ReqId, p: usize, c: &mut Ctx) -> Vec<ReqId> {
        let i = id as usize;
        self.output_len[i] = c.rt[i].output_len;
        c.rt[i].output_len = 1;
        self.times[i].prefill_instance = p as u32;
        self.times[i].arrived_s = c.now;
        self.pending[p] += 1;
        self.on_prefill[i] = true;
        match self.style {
            PdStyle::Vllm => {
                inst_enqueue(c.inst, p, (id, &c.rt[id as usize]), c.now, c.dirty);
                Vec::new()
            }
            PdStyle::Sglang => self.hand_to_decode(id, c),
        }
    }

    /// Prefill instance `p` sampled request `id`'s first token at `now`.
    pub fn prefilled(&mut self, id: ReqId, p: usize, c: &mut Ctx) -> Vec<ReqId> {
        debug_assert!(p < self.prefill);
        self.times[id as usize].prefill_done_s = c.now;
        match self.style {
            PdStyle::Vllm => self.hand_to_decode(id, c),
            PdStyle::Sglang => {
                self.send(id, c.now);
                Vec::new()
            }
        }
    }

    /// Instance `i` ended a step; if it decodes, its freed memory may admit hand-offs.
    pub fn freed(&mut self, i: usize, c: &mut Ctx) -> Vec<ReqId> {
        if i < self.prefill || self.waiting[i - self.prefill].is_empty() {
            return Vec::new();
        }
        self.allocate(i - self.prefill, c)
    }

    /// Decode instance `d` (pool index) allocates the prompts of its queue's head requests
    /// while it has room (vLLM: then pulls their KV; SGLang: then lets their prefill start).
    /// A head that cannot fit even an idle instance fails; it is returned.
    fn allocate(&mut self, d: usize, c: &mut Ctx) -> Vec<ReqId> {
        let mut lost = Vec::new();
        let mut start = Vec::new();
        let now = c.now;
        let x = &mut c.inst[self.prefill + d];
        while let Some(&id) = self.waiting[d].front() {
            let seq = c.w.requests[id as usize].seq;
            let prompt = c.rt[id as usize].prompt_len as usize;
            let hit = x.cache.peek(seq, prompt);
            match x.cache.admit(id, seq, prompt, prompt - hit) {
                Some(a) => {
                    self.waiting[d].pop_front();
                    self.holding[d] += 1;
                    self.held[id as usize] = true;
                    self.times[id as usize].bytes = (prompt - a.hit_tokens) as u64 * self.kv_bytes_per_token;
                    match self.style {
                        PdStyle::Vllm => self.send(id, now),
                        PdStyle::Sglang => start.push(id),
                    }
                }
                None => {
                    let u = x.cache.usage();
                    let (waiting, running) = x.sched.queued();
                    if u.used_tokens == u.evictable_tokens && waiting + running == 0 && self.holding[d] == 0 {
                        self.waiting[d].pop_front();
                        lost.push(id);
                        continue;
                    }
                    break;
                }
            }
        }
        for id in start {
            inst_enqueue(
                c.inst,
                self.times[id as usize].prefill_instance as usize,
                (id, &c.rt[id as usize]),
                now,
                c.dirty,
            );
        }
        lost
    }

    /// Puts request `id`'s KV on the first free lane at `now`.
    fn send(&mut self, id: ReqId, now: f64) {
        let t = &mut self.times[id as usize];
        let lane = (0..self.lanes.len()).min_by(|&a, &b| self.lanes[a].total_cmp(&self.lanes[b])).expect("a lane");
        let start = now.max(self.lanes[lane]);
        let end = start + self.link.transfer_s(t.bytes);
        self.lanes[lane] = end;
        t.transfer_start_s = start;
        t.transfer_end_s = end;
        self.transfers.push(Reverse((end.to_bits(), self.fifo, id)));
        self.fifo += 1;
    }

    /// Transfers ended by `now` land: the prefill instance frees the request's blocks, the decode
    /// instance holds its KV as computed (cached, so its own admission finds it) and queues it
    /// to decode.
    pub fn land(&mut self, c: &mut Ctx) {
        let Ctx { w, now, inst, rt, dirty } = c;
        let (w, now) = (*w, *now);
        while let Some(&Reverse((bits, _, id))) = self.transfers.peek() {
            if f64::from_bits(bits) > now {
                break;
            }
            self.transfers.pop();
            let i = id as usize;
            let t = self.times[i];
            let (p, d) = (t.prefill_instance as usize, self.prefill + t.decode_instance as usize);
            inst[p].cache.finish(id);
            dirty.mark(p);
            if std::mem::take(&mut self.on_prefill[i]) {
                self.pending[p] -= 1;
            }
            let prompt = rt[i].prompt_len as usize;
            if inst[d].cache.tracks_computed() {
                inst[d].cache.computed(id, prompt);
            }
            inst[d].cache.finish(id);
            self.holding[d - self.prefill] -= 1;
            self.held[i] = false;
            let r = &mut rt[i];
            let kept = *r;
            *r = ReqRt::new(w.requests[i].seq, kept.prompt_len, self.output_len[i]).sent_as(&w.requests[i]);
            r.admitted = true;
            r.cached_prompt_tokens = kept.cached_prompt_tokens;
            r.first_scheduled_s = kept.first_scheduled_s;
            r.preemptions = kept.preemptions;
            inst_enqueue(inst, d, (id, r), now, dirty);
        }
    }

    /// Request `id` sampled its first token on its decode instance at `now`.
    pub fn first_token(&mut self, id: ReqId, now: f64) {
        let d = self.times[id as usize].decode_instance;
        if d != u32::MAX {
            self.decode_router.prefill_done(id, d as usize, now);
        }
    }

    /// Request `id` failed on its prefill instance (it can never fit there): its decode
    /// instance drops what it allocated for it (SGLang's pre-allocation).
    pub fn abandon(&mut self, id: ReqId, inst: &mut [Instance], dirty: &mut Dirty) {
        if std::mem::take(&mut self.held[id as usize]) {
            let d = self.times[id as usize].decode_instance as usize;
            inst[self.prefill + d].cache.finish(id);
            self.holding[d] -= 1;
            dirty.mark(self.prefill + d);
        }
    }

    /// Request `id` (prefill instance `p`) completed or failed at `now`.
    pub fn completed(&mut self, id: ReqId, p: u32, now: f64, router: &mut dyn Router) {
        self.off_prefill(id);
        let t = self.times[id as usize];
        if t.prefill_done_s.is_nan() && p != u32::MAX {
            router.finished(id, p as usize, now); // failed before its prefill returned
        }
        if t.decode_instance != u32::MAX {
            self.decode_router.finished(id, t.decode_instance as usize, now);
        }
    }
}

fn inst_enqueue(inst: &mut [Instance], i: usize, (id, r): (ReqId, &ReqRt), now: f64, dirty: &mut Dirty) {
    inst[i].enqueue(id, r, now);
    dirty.mark(i);
}
