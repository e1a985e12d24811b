//! The shared clock of a deployment: N instances ([`Instance`]), the client ([`Client`]), the
//! router in front, and — for a disaggregated deployment — the hand-off from prefill to decode
//! instances over the KV link ([`super::disagg`]). The loop never scans all instances per
//! event: busy instances wait in a heap of step-end times, and only instances something happened
//! to (an arrival, a step end, freed memory) are asked to form a step.

use super::autoscale::{Act, Due, ScaleLog, Scaler};
use super::client::Client;
use super::disagg::{Ctx, Disagg, Pd};
use super::faults::{Event, Faults, StopKind};
use super::instance::{Begun, Instance, InstanceSpec, Sink};
use super::pool::{Dirty, View};
use super::shared_store::SharedStores;
use super::{Front, Keep, LoadStats, RouterStats, SimResult};
use crate::cache::storage::Store;
use crate::cache::ReqId;
use crate::cluster::autoscale::{AutoscalePlan, Rule, ScaleMetric};
use crate::cluster::faults::FaultPlan;
use crate::cluster::planner::{EngineModel, Engines, Limits};
use crate::cluster::router::{Arrival, Basis, Router};
use crate::engine::frontend::{self, FailReason, Verdict};
use crate::engine::ReqRt;
use crate::metrics::TokenLog;
use crate::workload::{SeqId, Workload};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// Failed requests by reason, with one engine message each.
pub(super) type Failures = BTreeMap<FailReason, (u64, String)>;

pub(super) fn fail(failures: &mut Failures, reason: FailReason, message: &str) {
    failures.entry(reason).or_insert_with(|| (0, message.to_string())).0 += 1;
}

/// Fails the requests instance `x`'s engine aborted (SGLang's full waiting queue) with the
/// engine's message; whether there were any.
fn fail_aborted(x: &mut Instance, failures: &mut Failures, finished: &mut Vec<ReqId>) -> bool {
    let mut out = Vec::new();
    x.sched.take_aborted(&mut out);
    for &(id, reason, message) in &out {
        fail(failures, reason, message);
        finished.push(id);
    }
    !out.is_empty()
}

/// Failed requests in all.
fn total(failures: &Failures) -> u64 {
    failures.values().map(|f| f.0).sum()
}

/// Finds, as early as it is certain, the origin of the clients' 1-second token buckets: the
/// earliest send of a completed request ([`TokenLog::set_origin`]). Requests reach the server in
/// the order they were sent (checked as they arrive; when not, the origin is left to the
/// summary), so once every request that arrived before one has failed and that one completes,
/// no request sent earlier can still complete, and none sent later matters.
struct Origin {
    /// Arrived requests in arrival (= send) order, until the origin is known.
    order: Vec<ReqId>,
    /// `order[..pos]` have failed.
    pos: usize,
    /// Records already marked in `state`.
    seen: usize,
    /// Per request: 0 not finished, 1 completed, 2 failed.
    state: Vec<u8>,
    /// Nothing left to do: the origin is set, or left to the summary.
    known: bool,
}

impl Origin {
    fn new(n: usize) -> Self {
        Origin { order: Vec::new(), pos: 0, seen: 0, state: vec![0; n], known: false }
    }

    fn arrived(&mut self, id: ReqId, send_s: &[f64]) {
        if self.known {
            return;
        }
        if self.order.last().is_some_and(|&last| send_s[id as usize] < send_s[last as usize]) {
            // Arrivals out of send order (send times closer than the request overhead's
            // rounding): the origin is left to the summary, from every token time kept.
            self.known = true;
            self.order = Vec::new();
            self.state = Vec::new();
            return;
        }
        self.order.push(id);
    }

    /// After `finished` requests left (completed ones have their record in `records`, the others
    /// failed): sets the log's origin when it is certain.
    fn update(
        &mut self,
        records: &[crate::metrics::RequestRecord],
        finished: &[ReqId],
        send_s: &[f64],
        log: &mut TokenLog,
    ) {
        if self.known || finished.is_empty() {
            return;
        }
        for r in &records[self.seen..] {
            self.state[r.id as usize] = 1;
        }
        self.seen = records.len();
        for &id in finished {
            if self.state[id as usize] == 0 {
                self.state[id as usize] = 2;
            }
        }
        while let Some(&id) = self.order.get(self.pos) {
            match self.state[id as usize] {
                0 => return, // still in flight
                1 => {
                    log.set_origin(send_s[id as usize]);
                    self.known = true;
                    self.order = Vec::new();
                    self.state = Vec::new();
                    return;
                }
                _ => self.pos += 1,
            }
        }
    }
}

/// What changes the fleet during a run: instance failures and rolling restarts, or an
/// autoscaler; and the store its storage tiers start on (none by default).
#[derive(Debug, Default)]
pub struct Fleet<'p> {
    pub faults: Option<&'p FaultPlan>,
    pub autoscale: Option<&'p AutoscalePlan>,
    /// Every storage tier's store, another run's, left in it at the end without the writes still
    /// in flight (never done, as in a run's own store). It holds views into the workload's
    /// sequences: give it one filled by a run of the same workload.
    pub store: Option<&'p mut Store>,
}

/// The metric `m` of one instance now, as its engine's gauge reads.
fn metric(x: &Instance, m: ScaleMetric) -> f64 {
    let (waiting, running) = x.queued();
    match m {
        ScaleMetric::Waiting => waiting as f64,
        ScaleMetric::Running => running as f64,
        ScaleMetric::InFlight => (waiting + running) as f64,
        ScaleMetric::KvUsage => {
            let u = x.kv_usage();
            // An unbounded cache (tests of the schedulers alone) is never full.
            u.capacity_tokens.map_or(0.0, |c| (u.used_tokens - u.evictable_tokens) as f64 / c.max(1) as f64)
        }
    }
}

/// What the SLA planner prices instances of `x` with.
fn model<'c>(x: &InstanceSpec<'c>) -> EngineModel<'c> {
    EngineModel {
        cost: x.cost,
        overlap: x.engine.overlap,
        limits: Limits {
            max_num_seqs: x.engine.max_num_seqs,
            max_num_batched_tokens: x.engine.max_num_batched_tokens,
            max_kv_tokens: x.cache.capacity_tokens.unwrap_or(u64::MAX),
        },
    }
}

/// Instance `i` leaves its router's list at `now`: the first `routed` instances are the
/// router's (`serving` counts them), the rest the decode pool's.
fn pool_down(i: usize, routed: usize, now: f64, router: &mut dyn Router, pd: Option<&mut Disagg>, serving: &mut usize) {
    if i < routed {
        *serving -= 1;
        router.instance_down(i, now);
    } else if let Some(pd) = pd {
        pd.decode_router_mut().instance_down(i - routed, now);
    }
}

/// Instance `i` joins its router's list at `now` (as [`pool_down`]).
fn pool_up(i: usize, routed: usize, now: f64, router: &mut dyn Router, pd: Option<&mut Disagg>, serving: &mut usize) {
    if i < routed {
        *serving += 1;
        router.instance_up(i, now);
    } else if let Some(pd) = pd {
        pd.decode_router_mut().instance_up(i - routed, now);
    }
}

/// The requests routed to instance `i` that have not finished, the ones finishing now
/// (`finished`) marked done first, so a stop cannot lose them.
fn held(assigned: &[u32], done: &mut [bool], finished: &[ReqId], i: usize) -> Vec<ReqId> {
    for &id in finished {
        done[id as usize] = true;
    }
    (0..assigned.len() as ReqId).filter(|&id| assigned[id as usize] == i as u32 && !done[id as usize]).collect()
}

/// Runs `sends` through the instances `specs`, each arrival routed by `router`, on one clock.
/// Events at one time happen in this order: steps ending then (by instance index) apply their
/// effects; KV transfers ending then land; completions free client slots and release next
/// turns; due requests are sent; sent requests that reached the server are routed and queued
/// (or rejected by the frontend); then every idle instance with something new forms its next
/// step (by index). With `pd`, `router` picks among the prefill instances. With
/// `fleet.faults`, instances fail and restart as planned, after the steps ending at that time
/// ([`crate::cluster::faults`]); with `fleet.autoscale`, an autoscaler starts and stops them
/// after that ([`crate::cluster::autoscale`]).
#[allow(clippy::too_many_arguments)]
pub fn drive(
    w: &Workload,
    sends: &[(u32, f64)],
    front: &Front,
    specs: &[InstanceSpec<'_>],
    router: &mut dyn Router,
    pd: Option<Pd<'_>>,
    fleet: Fleet<'_>,
    keep: Keep,
    progress: &dyn Fn(u64, f64),
) -> SimResult {
    assert!(!specs.is_empty(), "a deployment has at least one instance");
    let n = w.requests.len();
    // Without a frontend (tests of the schedulers alone) every request generates at least one
    // token; with one, its verdict decides: rejected requests fail when they arrive, cut ones
    // generate fewer tokens.
    let mut rt: Vec<ReqRt> =
        w.requests.iter().map(|r| ReqRt::new(r.seq, r.prompt_len, r.output_len.max(1)).sent_as(r)).collect();
    let mut rejected: Vec<Option<(FailReason, String)>> = vec![None; n];
    let mut outputs_cut = (0u64, 0u64);
    if let Some(lim) = front.limits {
        for &(id, _) in sends {
            let q = &w.requests[id as usize];
            match frontend::validate(front.engine.engine, lim, q.prompt_len, q.output_len) {
                Verdict::Serve { output_len } => {
                    if output_len < q.output_len {
                        outputs_cut.0 += 1;
                        outputs_cut.1 += (q.output_len - output_len) as u64;
                    }
                    rt[id as usize].output_len = output_len;
                }
                Verdict::Reject { reason, message } => rejected[id as usize] = Some((reason, message)),
            }
        }
    }
    // A run of some of the requests numbers only their sequences' blocks.
    let used: Option<Vec<SeqId>> = (sends.len() < n).then(|| {
        let mut s: Vec<SeqId> = sends.iter().map(|&(id, _)| w.requests[id as usize].seq).collect();
        s.sort_unstable();
        s.dedup();
        s
    });
    // A router reading KV events has every cache log them.
    let event_delay = router.kv_index().map(|e| e.delay_s());
    let make = |i: usize| {
        let mut x = Instance::new(w, specs[i], used.as_deref(), specs.len() == 1);
        if event_delay.is_some() {
            let logs = x.log_kv_events();
            debug_assert!(logs, "configuration refuses KV events for a cache without them");
        }
        x
    };
    let mut inst: Vec<Instance> = (0..specs.len()).map(make).collect();
    let mut store = fleet.store;
    let mut shared = SharedStores::new(specs, store.as_deref_mut().map(std::mem::take));
    // Instance `i` as it starts again after a stop: empty.
    let fresh = make;
    let mut kv_events: Vec<(u32, bool)> = Vec::new();
    let routed = pd.as_ref().map_or(inst.len(), |p| p.cfg.prefill as usize);
    debug_assert!(routed <= inst.len());
    let mut disagg = pd.map(|p| Disagg::new(p, routed, inst.len(), n));
    let mut client = Client::new(w, sends, front.max_concurrency, front.request_overhead_s);
    // Stretches of decode steps run as one event ([`Instance::coalesce`]) unless a finish on
    // another instance could bring an arrival sooner than the client's next event, or the
    // token records must come in time order across instances.
    let coalescing = !keep.every_step
        && disagg.is_none()
        // A coalesced stretch's steps would publish their KV events at its end.
        && event_delay.is_none()
        && (specs.len() == 1 || !(keep.tokens || client.sends_on_completion()));
    let mut assigned: Vec<u32> = vec![u32::MAX; n];
    let mut routing = RouterStats::default();
    debug_assert!(fleet.faults.is_none() || disagg.is_none(), "failures are modelled without PD pools");
    let mut faults = fleet.faults.map(|p| Faults::new(p, inst.len(), n));
    // The SLA planner prices the fleet's engine (every instance of a data-parallel fleet is
    // alike), or the prefill and the decode pools' engines.
    let engines = match &disagg {
        None => Engines::Agg(model(&specs[0])),
        Some(_) => Engines::Disagg(model(&specs[0]), model(&specs[routed])),
    };
    let mut scaler = fleet.autoscale.map(|p| Scaler::new(p, inst.len(), engines));
    // The routers' block (Dynamo's KV router counts its hits in blocks).
    let block = specs[0].cache.block_size.unwrap_or(1);
    // Under failures or autoscaling: requests that finished (so a stop cannot lose them), those
    // a failure sends on to another instance, and the instances serving.
    let mut done: Vec<bool> = if faults.is_some() || scaler.is_some() { vec![false; n] } else { Vec::new() };
    let (mut migrating, mut lost): (Vec<ReqId>, Vec<ReqId>) = (Vec::new(), Vec::new());
    let mut serving = routed;
    if let Some(s) = &scaler {
        // Instances beyond the initial fleet are off until a scale-up starts them.
        for (i, x) in inst.iter_mut().enumerate().filter(|(i, _)| s.off_at_start(*i)) {
            x.down = true;
            pool_down(i, routed, 0.0, router, disagg.as_mut(), &mut serving);
        }
    }
    // Instances whose step ends at a time: min-heap of (end bits, index, the instance's life),
    // 16 bytes an entry (at most `MAX_INSTANCES` instances).
    let mut busy: BinaryHeap<Reverse<(u64, u32, u32)>> = BinaryHeap::new();
    // Idle instances waiting for a KV tier's copy, as the busy heap (an engine with nothing to
    // run steps empty until the copy ends, then forms a step).
    let mut wakes: BinaryHeap<Reverse<(u64, u32, u32)>> = BinaryHeap::new();
    let mut dirty = Dirty::new(inst.len());
    let mut arrived: Vec<ReqId> = Vec::new();
    let mut finished: Vec<ReqId> = Vec::new();
    let mut handoff: Vec<ReqId> = Vec::new();
    let mut first_tokens: Vec<ReqId> = Vec::new();
    let mut log = TokenLog::counting(front.itl);
    let mut origin = Origin::new(n);
    let mut records = Vec::with_capacity(sends.len());
    let mut tokens = Vec::new();
    let mut failures: Failures = BTreeMap::new();
    let mut load = LoadStats::default();
    let mut now = 0.0f64;

    loop {
        // Completions free their slot and release their session's next turn; then sends due
        // by now reach the frontend, which rejects some at once (they complete too).
        loop {
            origin.update(&records, &finished, &client.send_s, &mut log);
            for id in finished.drain(..) {
                if let Some(d) = done.get_mut(id as usize) {
                    *d = true;
                }
                client.completed(id, now);
                if let Some(s) = scaler.as_mut().filter(|_| rt[id as usize].generated > 0) {
                    s.completed(rt[id as usize].generated);
                }
                let i = assigned[id as usize];
                match disagg.as_mut() {
                    Some(d) => d.completed(id, i, now, router),
                    None if i != u32::MAX => {
                        let r = &rt[id as usize];
                        if r.generated > 0 && r.generated == r.output_len {
                            router.response_ended(id, i as usize, r.generated, now, &View(&inst[..routed], &rt));
                        }
                        router.finished(id, i as usize, now)
                    }
                    None => {}
                }
            }
            client.send_due(now);
            client.arrivals(now, &mut arrived);
            let any_arrived = !arrived.is_empty();
            // Requests a failure sent on go first: they reached the router at the failure.
            let moved = migrating.len();
            for (k, id) in migrating.drain(..).chain(arrived.drain(..)).enumerate() {
                if k >= moved {
                    origin.arrived(id, &client.send_s);
                    if let Some(s) = scaler.as_mut() {
                        s.started(rt[id as usize].prompt_len);
                    }
                }
                if serving == 0 {
                    // Every instance is down: the gateway has no worker to send it to.
                    fail(&mut failures, FailReason::NoInstance, NO_INSTANCE);
                    finished.push(id);
                    continue;
                }
                let q = &w.requests[id as usize];
                let a = Arrival::of(id, q, &w.store, now);
                if !router.admit(&a, &View(&inst[..routed], &rt)) {
                    fail(&mut failures, FailReason::SloRejected, SLO_REJECTED);
                    finished.push(id);
                    continue;
                }
                let d = router.route(&a, &View(&inst[..routed], &rt));
                debug_assert!(d.instance < routed);
                assigned[id as usize] = d.instance as u32;
                match d.basis {
                    Basis::Prefix => routing.by_prefix += 1,
                    Basis::Load => routing.by_load += 1,
                }
                routing.predicted_hit_tokens += d.predicted_hit_tokens;
                if let Some(s) = scaler.as_mut() {
                    s.routed(d.predicted_hit_tokens, rt[id as usize].prompt_len, block);
                }
                inst[d.instance].stats.requests += 1;
                debug_assert!(!inst[d.instance].down, "routed to an instance that is down");
                match (&rejected[id as usize], disagg.as_mut()) {
                    (None, None) => {
                        inst[d.instance].enqueue(id, &rt[id as usize], now);
                        fail_aborted(&mut inst[d.instance], &mut failures, &mut finished);
                        dirty.mark(d.instance);
                    }
                    (None, Some(pd)) => {
                        let lost = pd.arrive(
                            id,
                            d.instance,
                            &mut Ctx { w, now, inst: &mut inst, rt: &mut rt, dirty: &mut dirty },
                        );
                        for id in lost {
                            fail(&mut failures, FailReason::NeverFits, NEVER_FITS);
                            finished.push(id);
                        }
                    }
                    (Some((reason, message)), _) => {
                        fail(&mut failures, *reason, message);
                        finished.push(id);
                    }
                }
            }
            // The backlog matters at the last send only: counted (a pass over the instances)
            // when nothing else is planned to arrive yet.
            if any_arrived && client.next_event().is_none() {
                load.last_send_s = now;
                load.backlog_at_last_send = inst.iter().map(|x| x.queued().0 as u32).sum();
            }
            if finished.is_empty() {
                break;
            }
        }
        // Idle instances with news form their next step.
        if dirty.list.len() > 1 {
            dirty.list.sort_unstable();
        }
        let mut again = false;
        for i in std::mem::take(&mut dirty.list) {
            dirty.unmark(i);
            if !inst[i].can_schedule() {
                continue; // it schedules when its step ends
            }
            let may_reject = disagg.as_ref().is_none_or(|pd| pd.may_reject(i));
            shared.swap(i, &mut inst[i]);
            let begun = inst[i].begin_step(now, &mut rt, keep, may_reject);
            shared.swap(i, &mut inst[i]);
            // Retracted or preempted requests that went back to a full waiting queue.
            again |= fail_aborted(&mut inst[i], &mut failures, &mut finished);
            match begun {
                Begun::Busy(end) => {
                    if let Some(delay) = event_delay {
                        // Published when the step ends (`update_from_output`), read `delay` later.
                        inst[i].take_kv_events(&mut kv_events);
                        if !kv_events.is_empty() {
                            if let Some(e) = router.kv_index() {
                                e.receive(i, end + delay, &kv_events);
                            }
                            kv_events.clear();
                        }
                    }
                    let end = if coalescing {
                        // No step of the stretch may start at or after anything that can
                        // reach or read this instance.
                        let horizon = [client.next_event(), faults.as_ref().and_then(Faults::next_event)]
                            .into_iter()
                            .flatten()
                            .chain(scaler.as_ref().map(Scaler::next_event))
                            .fold(f64::INFINITY, f64::min);
                        inst[i].coalesce(end, &mut rt, keep, horizon, &mut log, &mut tokens)
                    } else {
                        end
                    };
                    busy.push(Reverse((end.to_bits(), i as u32, inst[i].generation)));
                    if inst[i].can_schedule() {
                        // Under PP another batch may join the pipeline at once.
                        dirty.mark(i);
                        again = true;
                    }
                }
                Begun::Retry => {
                    dirty.mark(i);
                    again = true;
                }
                Begun::RejectedHead(id) => {
                    if let Some(pd) = disagg.as_mut() {
                        pd.abandon(id, &mut inst, &mut dirty);
                    }
                    fail(&mut failures, FailReason::NeverFits, NEVER_FITS);
                    finished.push(id);
                    dirty.mark(i);
                    again = true;
                }
                Begun::Idle => {
                    if let Some(t) = inst[i].next_copy_end() {
                        wakes.push(Reverse((t.max(now).to_bits(), i as u32, inst[i].generation)));
                    }
                }
            }
            // A decode instance with nothing to run may still owe hand-offs an allocation (or
            // owe them a failure, when they cannot fit it idle).
            if let Some(pd) = disagg.as_mut().filter(|_| inst[i].busy_until.is_none()) {
                for id in pd.freed(i, &mut Ctx { w, now, inst: &mut inst, rt: &mut rt, dirty: &mut dirty }) {
                    fail(&mut failures, FailReason::NeverFits, NEVER_FITS);
                    finished.push(id);
                    again = true;
                }
            }
        }
        if again || dirty.list.iter().any(|&i| inst[i].can_schedule()) {
            continue;
        }
        let next = [
            busy.peek().map(|&Reverse((bits, _, _))| f64::from_bits(bits)),
            wakes.peek().map(|&Reverse((bits, _, _))| f64::from_bits(bits)),
            client.next_event(),
            disagg.as_ref().and_then(Disagg::next_event),
        ]
        .into_iter()
        .flatten()
        .min_by(f64::total_cmp);
        // Failures and restarts matter while something else is still to happen.
        let Some(next) = next else { break };
        let next = faults.as_ref().and_then(Faults::next_event).map_or(next, |f| f.min(next));
        let next = scaler.as_ref().map_or(next, |s| s.next_event().min(next));
        now = now.max(next);
        let mut any_finished = false;
        while let Some(&Reverse((bits, i, life))) = busy.peek() {
            if f64::from_bits(bits) > now {
                break;
            }
            busy.pop();
            let i = i as usize;
            if life != inst[i].generation {
                continue; // begun before the instance failed: it never ends
            }
            let before = finished.len();
            let mut sink = Sink {
                w,
                keep,
                send_s: &client.send_s,
                log: &mut log,
                tokens: &mut tokens,
                records: &mut records,
                finished: &mut finished,
                handoff: &mut handoff,
                first_tokens: &mut first_tokens,
            };
            inst[i].end_step(&mut rt, &mut sink);
            for id in first_tokens.drain(..) {
                if let Some(s) = scaler.as_mut() {
                    s.first_token();
                }
                match disagg.as_mut() {
                    None => router.prefill_done(id, i, now),
                    Some(pd) => pd.first_token(id, now),
                }
            }
            any_finished |= finished.len() > before;
            dirty.mark(i);
            if let Some(pd) = disagg.as_mut() {
                let mut lost = Vec::new();
                for id in handoff.drain(..) {
                    router.finished(id, i, now);
                    lost.extend(pd.prefilled(
                        id,
                        i,
                        &mut Ctx { w, now, inst: &mut inst, rt: &mut rt, dirty: &mut dirty },
                    ));
                }
                // Memory freed on a decode instance may let its hand-off queue move.
                lost.extend(pd.freed(i, &mut Ctx { w, now, inst: &mut inst, rt: &mut rt, dirty: &mut dirty }));
                for id in lost {
                    fail(&mut failures, FailReason::NeverFits, NEVER_FITS);
                    finished.push(id);
                    any_finished = true;
                }
            }
        }
        while let Some(&Reverse((bits, i, life))) = wakes.peek() {
            if f64::from_bits(bits) > now {
                break;
            }
            wakes.pop();
            // A busy instance polls when its step ends.
            if life == inst[i as usize].generation && inst[i as usize].busy_until.is_none() {
                dirty.mark(i as usize);
            }
        }
        if let Some(pd) = disagg.as_mut() {
            pd.land(&mut Ctx { w, now, inst: &mut inst, rt: &mut rt, dirty: &mut dirty });
        }
        if let Some(f) = faults.as_mut() {
            // A draining instance with nothing left stops now.
            if let Some(i) = f.draining().filter(|&i| inst[i].draining && inst[i].is_empty()) {
                f.drained(i, now);
            }
            while let Some(event) = f.pop_due(now) {
                let (i, kind) = match event {
                    Event::Restart(i) => {
                        inst[i].down = false;
                        serving += 1;
                        router.instance_up(i, now);
                        f.restarted(i, now);
                        continue;
                    }
                    Event::Drain(i) => {
                        f.drain_started(i, now); // down already: its restart counts as this one
                        if !inst[i].down {
                            inst[i].draining = true;
                            serving -= 1;
                            router.instance_down(i, now);
                            if inst[i].is_empty() {
                                f.drained(i, now);
                            }
                        }
                        continue;
                    }
                    Event::Fail(i) if !inst[i].down => (i, StopKind::Failure),
                    Event::Stop(i) if inst[i].draining => (i, StopKind::Restart),
                    Event::Fail(_) | Event::Stop(_) => continue, // down already, or drained already
                };
                let held = held(&assigned, &mut done, &finished, i);
                let routable = !inst[i].draining;
                inst[i].crash(now, fresh(i));
                if routable {
                    serving -= 1;
                }
                let moved = migrating.len();
                f.settle(i, now, kind, &mut rt, held.into_iter(), serving > 0, &mut migrating, &mut lost);
                for &id in &migrating[moved..] {
                    router.finished(id, i, now);
                }
                for id in lost.drain(..) {
                    fail(&mut failures, FailReason::InstanceFailed, INSTANCE_FAILED);
                    finished.push(id);
                    any_finished = true;
                }
                if routable {
                    router.instance_down(i, now);
                }
            }
        }
        if let Some(s) = scaler.as_mut() {
            // Draining instances with nothing left stop now (a stop leaves the list).
            let mut k = 0;
            while let Some(&i) = s.draining.get(k) {
                if inst[i].is_empty() && disagg.as_ref().is_none_or(|d| d.quiet(i)) {
                    inst[i].crash(now, fresh(i));
                    s.stopped(i, now, 0);
                } else {
                    k += 1;
                }
            }
            while let Some(due) = s.pop_due(now) {
                match due {
                    Due::Sync => {
                        let m = match &s.plan.rule {
                            Rule::Hpa(h) => Some(h.metric),
                            Rule::Sla(_) => None,
                        };
                        for act in s.sync(now, |i| m.map_or(0.0, |m| metric(&inst[i], m))) {
                            let Act::Drain(i) = act;
                            inst[i].draining = true;
                            pool_down(i, routed, now, router, disagg.as_mut(), &mut serving);
                            if inst[i].is_empty() && disagg.as_ref().is_none_or(|d| d.quiet(i)) {
                                inst[i].crash(now, fresh(i));
                                s.stopped(i, now, 0);
                            }
                        }
                    }
                    Due::Ready(i) => {
                        inst[i].down = false;
                        pool_up(i, routed, now, router, disagg.as_mut(), &mut serving);
                        s.ready(i, now);
                    }
                    Due::Timeout(i) => {
                        // The drain timeout: what the instance still holds fails with it.
                        let held = held(&assigned, &mut done, &finished, i);
                        inst[i].crash(now, fresh(i));
                        s.stopped(i, now, held.len() as u32);
                        for id in held {
                            fail(&mut failures, FailReason::ScaledDown, SCALED_DOWN);
                            finished.push(id);
                            any_finished = true;
                        }
                    }
                }
            }
        }
        if any_finished {
            progress(records.len() as u64 + total(&failures), now);
        }
    }
    debug_assert!(finished.is_empty() && client.is_done());
    for r in &records {
        routing.real_hit_tokens += r.cached_prompt_tokens as u64;
    }
    let mut instances = Vec::with_capacity(inst.len());
    let mut cache = crate::cache::CacheStats::default();
    let mut timeline = Vec::new();
    let mut schedule = Vec::new();
    let (mut steps, mut coalesced_steps) = (0, 0);
    let mut offload: Option<crate::engine::vllm_offload::OffloadStats> = None;
    let mut hicache: Option<crate::cache::hicache::HostTierStats> = None;
    let mut lora: Option<crate::engine::vllm_lora::LoraStats> = None;
    for (i, x) in inst.into_iter().enumerate() {
        coalesced_steps += x.coalesced_steps;
        if let Some(o) = x.offload_stats() {
            offload.get_or_insert_with(Default::default).merge(&o);
        }
        if let Some(o) = x.hicache_stats() {
            hicache.get_or_insert_with(Default::default).merge(&o);
        }
        if let Some(o) = x.lora_stats() {
            lora.get_or_insert_with(Default::default).add(&o);
        }
        let mut st = x.stats;
        st.busy_s = x.load.busy_s;
        load.busy_s += x.load.busy_s;
        load.kv_full_s += x.load.kv_full_s;
        steps += st.steps;
        if i == 0 {
            cache = x.cache_stats();
            timeline = x.timeline;
            schedule = x.schedule;
        } else {
            cache.merge(&x.cache_stats());
            timeline.extend(x.timeline);
            schedule.extend(x.schedule);
        }
        instances.push(st);
    }
    if let Some(st) = hicache.as_mut().and_then(|h| h.storage.as_mut()) {
        shared.add_to(st);
    }
    if let Some(st) = offload.as_mut().and_then(|h| h.remote.as_mut()) {
        shared.add_to_remote(st);
    }
    if let Some(store) = store {
        *store = shared.into_store();
        store.drop_pending();
    }
    let (faults, migrations) = faults.map(|f| (f.records, f.migrations)).unwrap_or_default();
    let scaling = scaler.map(|s| ScaleLog { syncs: s.syncs, changes: s.changes }).unwrap_or_default();
    SimResult {
        failed: total(&failures),
        records,
        failures,
        outputs_cut,
        load,
        log,
        cache,
        steps,
        coalesced_steps,
        offload,
        hicache,
        lora,
        timeline,
        tokens,
        schedule,
        instances,
        router: routing,
        assigned,
        pd: disagg.map(Disagg::into_times).unwrap_or_default(),
        faults,
        migrations,
        scaling,
    }
}

const NEVER_FITS: &str = "the request does not fit the KV cache even alone";
const SLO_REJECTED: &str = "no valid endpoint available to serve the request";
const INSTANCE_FAILED: &str = "the instance serving the request failed";
const NO_INSTANCE: &str = "no instance was serving when the request arrived";
const SCALED_DOWN: &str = "a scale-down stopped the instance serving the request at its drain timeout";
