//! A run's autoscaler ([`crate::cluster::autoscale`], [`crate::cluster::planner`]) on the
//! driver's clock: the syncs every period, the SLA planner's traffic window, each instance's
//! life (off, starting, serving, draining) within its pool (one, or prefill and decode), the
//! cold starts that end in serving and the drain timeouts, and the record of both for the
//! report. Which instance starts: the pool's lowest-numbered one that is off; which goes on a
//! scale-down: one still starting (the newest first), else the one that began serving last (the
//! highest-numbered among equals), as the ReplicaSet controller ranks pods to delete.

use crate::cluster::autoscale::{milli, AutoscalePlan, Decision, Hpa, Rule};
use crate::cluster::planner::{Engines, Outcome, Planner, Window};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// What happened to an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Change {
    /// A scale-up began its cold start.
    Start,
    /// Its cold start ended: it serves.
    Ready,
    /// A scale-down cancelled its cold start.
    Cancel,
    /// A scale-down took it out of the router's list; it finishes what it holds.
    Drain,
    /// It stopped: drained, or at the drain timeout (`lost` requests then).
    Stop,
}

/// One change of one instance.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ScaleChange {
    pub time_s: f64,
    pub instance: u32,
    pub change: Change,
    /// A stop at the drain timeout: the requests it still held, which fail.
    pub lost: u32,
}

/// One sync: the fleet then and the controller's decision.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ScaleSync {
    pub time_s: f64,
    pub serving: u32,
    pub starting: u32,
    pub draining: u32,
    /// The average metric over the serving instances, in its units (`None`: none served).
    pub average: Option<f64>,
    pub proposed: u32,
    pub desired: u32,
    /// The SLA planner's adjustment ([`crate::cluster::planner::Tick`]; absent under the HPA):
    /// the window's request rate, the next one's predicted rate, ISL and OSL, one engine's
    /// capacity for them (NaN where the tick had none), and what came of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_rps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_rps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_isl: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_osl: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine_rps: Option<f64>,
    /// Prefill/decode pools: the decode engine's rate (`engine_rps` is the prefill engine's)
    /// and the count set for each pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_engine_rps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desired_prefill: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desired_decode: Option<u32>,
    /// Under Dynamo's KV router: the KV hit rate the capacity search discounted prompts by.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_hit_rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
}

/// What the autoscaler did over a run (empty without one).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ScaleLog {
    /// Each sync, in time order.
    pub syncs: Vec<ScaleSync>,
    /// Each instance's changes, in time order.
    pub changes: Vec<ScaleChange>,
}

/// An instance's life.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Life {
    Off,
    /// Serves at this time.
    Starting(f64),
    /// Since this time (the order of becoming ready decides scale-downs).
    Serving(f64),
    Draining,
}

/// One due event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Due {
    /// The controller reads the metric and sets the count.
    Sync,
    /// Instance `i`'s cold start ends.
    Ready(usize),
    /// Instance `i`'s drain timeout is reached.
    Timeout(usize),
}

/// What a sync asks of the driver.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Act {
    /// Take instance `i` out of the router's list: it drains.
    Drain(usize),
}

/// Who decides the count.
enum Decide<'a> {
    Hpa(Hpa),
    /// The planner, the traffic of the interval so far, and the engines it prices.
    Sla(Box<Planner>, Window, Engines<'a>),
}

/// The autoscaler of a run.
pub(super) struct Scaler<'a> {
    pub plan: AutoscalePlan,
    decide: Decide<'a>,
    /// Instances of the first pool (all of them, or the prefill pool's); the rest decode.
    first: usize,
    life: Vec<Life>,
    /// Lives begun per instance: a cold start or a drain of an earlier life is stale.
    epoch: Vec<u32>,
    /// Syncs so far: the next is at (n + 1) × the period (a product, so no drift over a day).
    synced: u64,
    next_sync: f64,
    /// (time bits, 0 ready / 1 timeout, instance, epoch), earliest first.
    events: BinaryHeap<Reverse<(u64, u8, u32, u32)>>,
    /// Instances draining, by index.
    pub draining: Vec<usize>,
    pub syncs: Vec<ScaleSync>,
    pub changes: Vec<ScaleChange>,
}

impl<'a> Scaler<'a> {
    /// The autoscaler of `plan` over `instances` instances, of which the first `plan.initial`
    /// serve from the start (prefill/decode pools: the first `max_prefill` prefill, the rest
    /// decode, the first of each pool serving); the SLA planner prices `engines`.
    pub fn new(plan: &AutoscalePlan, instances: usize, engines: Engines<'a>) -> Self {
        debug_assert!(plan.max_instances as usize <= instances);
        let pools = plan.pools();
        let first = pools.map_or(instances, |x| x.max_prefill as usize);
        let serving = |i: usize| match pools {
            None => i < plan.initial as usize,
            Some(x) => i < x.prefill as usize || (first..first + x.decode as usize).contains(&i),
        };
        Scaler {
            plan: plan.clone(),
            decide: match &plan.rule {
                Rule::Hpa(rule) => Decide::Hpa(Hpa::new(plan, rule)),
                Rule::Sla(p) => Decide::Sla(Box::new(Planner::new(p)), Window::default(), engines),
            },
            first,
            life: (0..instances).map(|i| if serving(i) { Life::Serving(0.0) } else { Life::Off }).collect(),
            epoch: vec![0; instances],
            synced: 0,
            next_sync: plan.period_s(),
            events: BinaryHeap::new(),
            draining: Vec::new(),
            syncs: Vec::new(),
            changes: Vec::new(),
        }
    }

    /// Whether instance `i` is off at the start (the driver keeps it out of the router's list).
    pub fn off_at_start(&self, i: usize) -> bool {
        self.life[i] == Life::Off
    }

    /// When the next event is due.
    pub fn next_event(&self) -> f64 {
        let e = self.events.peek().map_or(f64::INFINITY, |&Reverse((bits, ..))| f64::from_bits(bits));
        e.min(self.next_sync)
    }

    /// The next event due by `now`, if any: cold starts and timeouts before a sync at the same
    /// time, so the sync sees the fleet as it is then.
    pub fn pop_due(&mut self, now: f64) -> Option<Due> {
        while let Some(&Reverse((bits, kind, i, epoch))) = self.events.peek() {
            if f64::from_bits(bits) > now {
                break;
            }
            self.events.pop();
            let i = i as usize;
            if epoch != self.epoch[i] {
                continue; // cancelled, or a drain that already stopped
            }
            return Some(if kind == 0 { Due::Ready(i) } else { Due::Timeout(i) });
        }
        if self.next_sync <= now {
            self.synced += 1;
            self.next_sync = (self.synced + 1) as f64 * self.plan.period_s();
            return Some(Due::Sync);
        }
        None
    }

    /// A request reached the frontend with `prompt` tokens (the SLA planner's traffic).
    pub fn started(&mut self, prompt: u32) {
        if let Decide::Sla(_, w, _) = &mut self.decide {
            w.started += 1;
            w.input_tokens += prompt as u64;
        }
    }

    /// The router placed a request of `prompt` tokens where `hit` of them were cached, in
    /// blocks of `block` tokens (Dynamo's KV router's hit rate: overlap blocks over the
    /// prompt's blocks).
    pub fn routed(&mut self, hit: u64, prompt: u32, block: u32) {
        if let Decide::Sla(_, w, _) = &mut self.decide {
            let block = block.max(1) as u64;
            let blocks = (prompt as u64).div_ceil(block);
            if blocks > 0 {
                w.kv_hit_sum += (hit / block) as f64 / blocks as f64;
                w.kv_hits += 1;
            }
        }
    }

    /// A request's first token went out.
    pub fn first_token(&mut self) {
        if let Decide::Sla(_, w, _) = &mut self.decide {
            w.first_tokens += 1;
        }
    }

    /// A request completed with `outputs` tokens.
    pub fn completed(&mut self, outputs: u32) {
        if let Decide::Sla(_, w, _) = &mut self.decide {
            w.completed += 1;
            w.output_tokens += outputs as u64;
            w.itl_observed += (outputs >= 2) as u64;
        }
    }

    /// A sync at `now`: the HPA reads `value(i)` — the metric of each serving instance — and
    /// the SLA planner the interval's traffic; each decides, and instances start or stop.
    /// Returns the drains the driver carries out.
    pub fn sync(&mut self, now: f64, value: impl Fn(usize) -> f64) -> Vec<Act> {
        let mut ready = Vec::new();
        let (mut starting, mut draining) = (0u32, 0u32);
        for (i, l) in self.life.iter().enumerate() {
            match l {
                Life::Serving(_) => ready.push(i),
                Life::Starting(_) => starting += 1,
                Life::Draining => draining += 1,
                Life::Off => {}
            }
        }
        let current = ready.len() as u32 + starting;
        // Each pool's instances serving or starting.
        // Each pool: its instances, those serving or starting, and the count to set (so far
        // the same).
        let pool = |r: std::ops::Range<usize>| {
            let n = self.life[r.clone()].iter().filter(|l| matches!(l, Life::Serving(_) | Life::Starting(_))).count();
            (r, n as u32, n as u32)
        };
        let mut pools = [pool(0..self.first), pool(self.first..self.life.len())];
        let mut record = ScaleSync {
            time_s: now,
            serving: ready.len() as u32,
            starting,
            draining,
            average: None,
            proposed: current,
            desired: current,
            observed_rps: None,
            predicted_rps: None,
            predicted_isl: None,
            predicted_osl: None,
            engine_rps: None,
            decode_engine_rps: None,
            desired_prefill: None,
            desired_decode: None,
            kv_hit_rate: None,
            outcome: None,
        };
        match &mut self.decide {
            Decide::Hpa(hpa) => {
                let values: Vec<i64> = ready.iter().map(|&i| milli(value(i))).collect();
                let d: Decision = hpa.sync(now, current, &values, starting);
                record.average = d.average_milli.map(|m| m as f64 / 1e3);
                record.proposed = d.proposed;
                record.desired = d.desired;
                pools[0].2 = d.desired;
            }
            Decide::Sla(planner, window, engines) => {
                let tick = planner.tick(window, engines);
                *window = Window::default();
                let mut outcome = tick.outcome;
                if let Some(d) = tick.desired {
                    let dd = tick.desired_decode;
                    let proposed = d + dd.unwrap_or(0);
                    record.proposed = proposed;
                    // Kubernetes' connector ignores a new count while the deployment is not ready.
                    let changes = d != pools[0].1 || dd.is_some_and(|dd| dd != pools[1].1);
                    if changes && starting > 0 {
                        outcome = Outcome::NotReady;
                    } else {
                        record.desired = proposed;
                        pools[0].2 = d;
                        pools[1].2 = dd.unwrap_or(pools[1].1);
                    }
                }
                if matches!(engines, Engines::Disagg(..)) {
                    record.desired_prefill = Some(pools[0].2);
                    record.desired_decode = Some(pools[1].2);
                    record.decode_engine_rps = Some(tick.decode_engine_rps);
                }
                record.observed_rps = Some(tick.observed_rps);
                record.predicted_rps = Some(tick.predicted_rps);
                record.predicted_isl = Some(tick.predicted_isl);
                record.predicted_osl = Some(tick.predicted_osl);
                record.engine_rps = Some(tick.engine_rps);
                if planner.plan.router_kv_hit_rate {
                    record.kv_hit_rate = Some(tick.kv_hit_rate);
                }
                record.outcome = Some(outcome);
            }
        }
        self.syncs.push(record);
        let mut acts = Vec::new();
        for (range, now_wanted, desired) in pools {
            self.resize(now, range, now_wanted, desired, &mut acts);
        }
        acts
    }

    /// Sets the pool of instances `range`, `current` of them serving or starting, to `desired`:
    /// a scale-up starts the lowest-numbered instances that are off; a scale-down cancels
    /// starting ones (the newest first: latest ready time, then highest index), then drains the
    /// serving one that became ready last.
    fn resize(&mut self, now: f64, range: std::ops::Range<usize>, current: u32, desired: u32, acts: &mut Vec<Act>) {
        if desired > current {
            let ready_at = now + self.plan.cold_start.seconds;
            let mut todo = desired - current;
            for i in range.clone() {
                if todo == 0 {
                    break;
                }
                if self.life[i] == Life::Off {
                    self.life[i] = Life::Starting(ready_at);
                    self.epoch[i] += 1;
                    self.events.push(Reverse((ready_at.to_bits(), 0, i as u32, self.epoch[i])));
                    self.change(now, i, Change::Start, 0);
                    todo -= 1;
                }
            }
        }
        for _ in desired..current {
            let pick = |want_starting: bool| {
                range
                    .clone()
                    .filter_map(|i| match self.life[i] {
                        Life::Starting(t) if want_starting => Some((t, i)),
                        Life::Serving(t) if !want_starting => Some((t, i)),
                        _ => None,
                    })
                    .max_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
                    .map(|(_, i)| i)
            };
            if let Some(i) = pick(true) {
                self.life[i] = Life::Off;
                self.epoch[i] += 1;
                self.change(now, i, Change::Cancel, 0);
            } else if let Some(i) = pick(false) {
                self.life[i] = Life::Draining;
                self.epoch[i] += 1;
                // Prefill/decode pools drain without a timeout (an infinite one).
                let at = now + self.plan.drain_timeout_s;
                if at.is_finite() {
                    self.events.push(Reverse((at.to_bits(), 1, i as u32, self.epoch[i])));
                }
                self.draining.push(i);
                self.change(now, i, Change::Drain, 0);
                acts.push(Act::Drain(i));
            }
        }
    }

    /// Instance `i`'s cold start ended at `now`: it serves.
    pub fn ready(&mut self, i: usize, now: f64) {
        debug_assert!(matches!(self.life[i], Life::Starting(_)));
        self.life[i] = Life::Serving(now);
        self.change(now, i, Change::Ready, 0);
    }

    /// The draining instance `i` stopped at `now`, `lost` requests lost with it.
    pub fn stopped(&mut self, i: usize, now: f64, lost: u32) {
        debug_assert_eq!(self.life[i], Life::Draining);
        self.life[i] = Life::Off;
        self.epoch[i] += 1;
        self.draining.retain(|&d| d != i);
        self.change(now, i, Change::Stop, lost);
    }

    fn change(&mut self, time_s: f64, i: usize, change: Change, lost: u32) {
        self.changes.push(ScaleChange { time_s, instance: i as u32, change, lost });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::autoscale::{AutoscaleOptions, AutoscalePolicy, ScaleMetric};

    fn plan(initial: u32, max: u32) -> AutoscalePlan {
        AutoscaleOptions {
            policy: Some(AutoscalePolicy::Hpa),
            max_instances: Some(max),
            metric: Some(ScaleMetric::Waiting),
            target: Some(2.0),
            cold_start_s: Some(100.0),
            down_window_s: Some(0.0),
            ..AutoscaleOptions::default()
        }
        .plan(initial, 1, 0.0, 30.0, None)
        .unwrap()
        .unwrap()
    }

    static COST: crate::cost::Affine =
        crate::cost::Affine { base_s: 0.01, per_prefill_token_s: 1e-5, per_decode_seq_s: 1e-4, per_ctx_token_s: 0.0 };

    /// The engine the SLA planner would price (the HPA reads none).
    fn engine() -> Engines<'static> {
        use crate::cluster::planner::{EngineModel, Limits};
        Engines::Agg(EngineModel {
            cost: &COST,
            overlap: false,
            limits: Limits { max_num_seqs: 256, max_num_batched_tokens: 2048, max_kv_tokens: 100_000 },
        })
    }

    #[test]
    fn a_scale_up_starts_the_lowest_off_instances_and_a_scale_down_cancels_the_newest_start_first() {
        let mut s = Scaler::new(&plan(1, 4), 4, engine());
        assert!(!s.off_at_start(0) && s.off_at_start(1));
        assert_eq!(s.next_event(), 15.0);
        assert_eq!(s.pop_due(15.0), Some(Due::Sync));
        // 1 serving with 8 waiting, target 2: 4 wanted, 3 start; they serve at 115 s.
        assert!(s.sync(15.0, |_| 8.0).is_empty());
        assert_eq!(s.changes.iter().filter(|c| c.change == Change::Start).count(), 3);
        assert_eq!(s.next_event(), 30.0);
        // Idle from 30 s (window 0): the starting instances count as at the target on a
        // scale-down, (0 + 3 × 2) / 4 = 1.5 → 3 wanted, then (0 + 2 × 2) / 3 → 2, then 1: one
        // start cancelled per sync, the newest first; the serving one is kept.
        let cancelled = |s: &Scaler| -> Vec<u32> {
            s.changes.iter().filter(|c| c.change == Change::Cancel).map(|c| c.instance).collect()
        };
        for (t, want) in [(30.0, vec![3]), (45.0, vec![3, 2]), (60.0, vec![3, 2, 1])] {
            assert_eq!(s.pop_due(t), Some(Due::Sync));
            assert!(s.sync(t, |_| 0.0).is_empty());
            assert_eq!(cancelled(&s), want, "{t}");
        }
        // Their cold starts are stale: nothing but syncs comes due.
        assert_eq!(s.pop_due(120.0), Some(Due::Sync));
        s.sync(75.0, |_| 0.0);
        assert_eq!(s.syncs.last().map(|x| (x.serving, x.starting)), Some((1, 0)));
    }

    #[test]
    fn a_scale_down_drains_the_instance_ready_last() {
        let mut s = Scaler::new(&plan(1, 3), 3, engine());
        s.pop_due(15.0);
        s.sync(15.0, |_| 6.0); // 3 wanted: 1 and 2 start, serve at 115 s
        while let Some(d) = s.pop_due(115.0) {
            match d {
                Due::Ready(i) => s.ready(i, 115.0),
                Due::Sync => {
                    s.sync(115.0, |_| 6.0);
                }
                Due::Timeout(_) => unreachable!(),
            }
        }
        assert_eq!(s.syncs.last().map(|x| x.serving), Some(3));
        // Idle: down to 1; instances 2 then 1 drain (both ready at 115 s: the higher first).
        s.pop_due(120.0);
        let acts = s.sync(120.0, |_| 0.0);
        assert_eq!(acts, vec![Act::Drain(2), Act::Drain(1)]);
        assert_eq!(s.next_event(), 135.0);
        s.stopped(2, 125.0, 0);
        // Instance 1's timeout is due at 150 s; 2's is stale.
        let mut due = Vec::new();
        while let Some(d) = s.pop_due(150.0) {
            if d != Due::Sync {
                due.push(d);
            } else {
                s.sync(150.0, |_| 0.0);
            }
        }
        assert_eq!(due, vec![Due::Timeout(1)]);
    }
}
