//! A run's failure schedule ([`crate::cluster::faults::FaultPlan`]) as events on the driver's
//! clock: each instance's failures (planned, or drawn from the exponential distribution of mean
//! `--mtbf-s` from when it starts serving), a rolling restart's drains and stops, and the
//! restarts, in time order (at equal times: restarts, drains, failures, stops; then by
//! instance). What each stop did is recorded for the report.

use crate::cache::ReqId;
use crate::cluster::faults::FaultPlan;
use crate::engine::ReqRt;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Why an instance stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopKind {
    /// It crashed.
    #[default]
    Failure,
    /// A rolling restart took it down after it drained.
    Restart,
}

/// What one stop did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct FaultRecord {
    pub kind: StopKind,
    /// When the instance stopped and when it served again (seconds; the restart may fall after
    /// the run's last request).
    pub time_s: f64,
    pub back_s: f64,
    pub instance: u32,
    /// A restart: how long it drained before it stopped (seconds; 0 for a failure).
    pub drain_s: f64,
    /// Requests it held: started (some KV computed or a token streamed) and waiting.
    pub running: u32,
    pub waiting: u32,
    /// Of those, continued on another instance, and failed.
    pub migrated: u32,
    pub failed: u32,
    /// Tokens the migrated requests had to prefill again (prompt and streamed output).
    pub recomputed_tokens: u64,
}

/// Event kinds, in their order at equal times.
const RESTART: u8 = 0;
const DRAIN: u8 = 1;
const FAIL: u8 = 2;
const STOP: u8 = 3;

/// The pending failure events.
pub(super) struct Faults {
    pub plan: FaultPlan,
    /// (time bits, kind, instance), earliest first.
    events: BinaryHeap<Reverse<(u64, u8, usize)>>,
    rng: rand::rngs::StdRng,
    exp: Option<Exp<f64>>,
    pub records: Vec<FaultRecord>,
    /// Requests migrated so far, by request id.
    pub migrations: Vec<u32>,
    /// The instances, and the one the rolling restart is at with when it began draining.
    instances: usize,
    rolling: Option<(usize, f64)>,
}

/// One event due.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Event {
    /// The instance crashes.
    Fail(usize),
    /// The rolling restart takes it out of the router's list; it finishes what it holds.
    Drain(usize),
    /// A draining instance stops (drained, or at its drain timeout).
    Stop(usize),
    /// It serves again.
    Restart(usize),
}

impl Faults {
    /// The schedule of `plan` over `instances` instances serving `requests` requests.
    pub fn new(plan: &FaultPlan, instances: usize, requests: usize) -> Self {
        let mut f = Faults {
            plan: plan.clone(),
            events: BinaryHeap::new(),
            rng: rand::rngs::StdRng::seed_from_u64(plan.seed ^ 0xFA11_u64),
            exp: plan.mtbf_s.and_then(|m| Exp::new(1.0 / m).ok()),
            records: Vec::new(),
            migrations: vec![0; requests],
            instances,
            rolling: None,
        };
        for a in &plan.fail_at {
            f.push(a.time_s, FAIL, a.instance as usize);
        }
        if let Some(t) = plan.rolling_restart_s {
            f.push(t, DRAIN, 0);
        }
        for i in 0..instances {
            f.draw(i, 0.0);
        }
        f
    }

    fn push(&mut self, t: f64, kind: u8, i: usize) {
        self.events.push(Reverse((t.to_bits(), kind, i)));
    }

    /// Draws instance `i`'s next failure after it starts serving at `t` (under `--mtbf-s`).
    fn draw(&mut self, i: usize, t: f64) {
        if let Some(e) = self.exp {
            let dt = e.sample(&mut self.rng);
            self.push(t + dt, FAIL, i);
        }
    }

    /// When the next event is due.
    pub fn next_event(&self) -> Option<f64> {
        self.events.peek().map(|&Reverse((bits, _, _))| f64::from_bits(bits))
    }

    /// The next event due by `now`, if any.
    pub fn pop_due(&mut self, now: f64) -> Option<Event> {
        let &Reverse((bits, kind, i)) = self.events.peek()?;
        if f64::from_bits(bits) > now {
            return None;
        }
        self.events.pop();
        Some(match kind {
            RESTART => Event::Restart(i),
            DRAIN => Event::Drain(i),
            FAIL => Event::Fail(i),
            _ => Event::Stop(i),
        })
    }

    /// The instance the rolling restart is draining, if any.
    pub fn draining(&self) -> Option<usize> {
        self.rolling.map(|(i, _)| i)
    }

    /// Instance `i` starts draining at `now`: it stops at the drain timeout at the latest.
    pub fn drain_started(&mut self, i: usize, now: f64) {
        self.rolling = Some((i, now));
        self.push(now + self.plan.drain_timeout_s, STOP, i);
    }

    /// The draining instance `i` has nothing left at `now`: it stops now.
    pub fn drained(&mut self, i: usize, now: f64) {
        self.push(now, STOP, i);
    }

    /// Instance `i` stopped at `now`: it serves again after the recovery time (returned).
    fn schedule_restart(&mut self, i: usize, now: f64) -> f64 {
        let back = now + self.plan.recovery_s;
        self.push(back, RESTART, i);
        back
    }

    /// Instance `i` serves again at `now`: its next failure is drawn, and a rolling restart at
    /// it moves on to the next instance, which starts draining now.
    pub fn restarted(&mut self, i: usize, now: f64) {
        self.draw(i, now);
        if self.rolling.is_some_and(|(r, _)| r == i) {
            self.rolling = None;
            if i + 1 < self.instances {
                self.push(now, DRAIN, i + 1);
            }
        }
    }

    /// Instance `i` stopped at `now` (`kind`) holding the requests `held` (by id): each
    /// migrates (its engine state reset, pushed to `migrate`) while it has output left, the plan
    /// allows one more migration and `can_migrate` (another instance serves), else it is `lost`.
    /// Schedules the restart and records what the stop did.
    #[allow(clippy::too_many_arguments)]
    pub fn settle(
        &mut self,
        i: usize,
        now: f64,
        kind: StopKind,
        rt: &mut [ReqRt],
        held: impl Iterator<Item = ReqId>,
        can_migrate: bool,
        migrate: &mut Vec<ReqId>,
        lost: &mut Vec<ReqId>,
    ) {
        let back_s = self.schedule_restart(i, now);
        let drain_s = match (kind, self.rolling) {
            (StopKind::Restart, Some((r, from))) if r == i => now - from,
            _ => 0.0,
        };
        let mut rec = FaultRecord { kind, time_s: now, back_s, instance: i as u32, drain_s, ..FaultRecord::default() };
        for id in held {
            let r = &mut rt[id as usize];
            if r.num_computed > 0 || r.generated > 0 {
                rec.running += 1;
            } else {
                rec.waiting += 1;
            }
            let m = &mut self.migrations[id as usize];
            if can_migrate && *m < self.plan.migration_limit && r.generated < r.output_len {
                *m += 1;
                rec.migrated += 1;
                rec.recomputed_tokens += r.num_tokens as u64;
                r.migrated();
                migrate.push(id);
            } else {
                rec.failed += 1;
                lost.push(id);
            }
        }
        self.records.push(rec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::faults::FailAt;

    #[test]
    fn events_come_in_time_order_restarts_first_and_draws_repeat_with_the_seed() {
        let plan = FaultPlan {
            fail_at: vec![FailAt { time_s: 5.0, instance: 1 }, FailAt { time_s: 5.0, instance: 0 }],
            mtbf_s: None,
            recovery_s: 3.0,
            migration_limit: 0,
            rolling_restart_s: None,
            drain_timeout_s: 30.0,
            seed: 1,
        };
        let mut f = Faults::new(&plan, 2, 0);
        assert_eq!(f.next_event(), Some(5.0));
        assert_eq!(f.pop_due(4.9), None);
        assert_eq!(f.pop_due(5.0), Some(Event::Fail(0)));
        assert_eq!(f.schedule_restart(0, 5.0), 8.0);
        assert_eq!(f.pop_due(5.0), Some(Event::Fail(1)));
        f.schedule_restart(1, 5.0);
        assert_eq!(f.pop_due(8.0), Some(Event::Restart(0)));
        assert_eq!(f.pop_due(8.0), Some(Event::Restart(1)));
        assert_eq!(f.pop_due(100.0), None);

        let mtbf = FaultPlan { fail_at: Vec::new(), mtbf_s: Some(100.0), seed: 9, ..plan };
        let firsts = |seed| {
            let mut f = Faults::new(&FaultPlan { seed, ..mtbf.clone() }, 3, 0);
            (0..3).map(|_| f.events.pop().unwrap().0).collect::<Vec<_>>()
        };
        assert_eq!(firsts(9), firsts(9));
        assert_ne!(firsts(9), firsts(10));
        // The mean of many draws is near the MTBF.
        let mut f = Faults::new(&mtbf, 1, 0);
        let n = 20_000;
        let mean = (0..n)
            .map(|_| {
                let Reverse((bits, _, _)) = f.events.pop().unwrap();
                f.draw(0, 0.0);
                f64::from_bits(bits)
            })
            .sum::<f64>()
            / n as f64;
        assert!((mean - 100.0).abs() < 3.0, "{mean}");
    }
}
