//! SGLang's priority scheduling (`--enable-priority-scheduling`, SGLang 0.5.23; first in 0.5.3,
//! its preemption rule as today from 0.5.6, preempted requests re-queued from 0.5.22):
//! the flags and their refusals, each waiting request's priority and queue-entry stamp, the
//! queue's order, the choice of running requests a waiting one preempts, and the waiting
//! queue's bound (`--max-queued-requests`) with what it aborts. The scheduler
//! ([`super::Sglang`]) calls it where SGLang's `Scheduler` and `PrefillAdder` do
//! (docs/engines/sglang.md, "Priority scheduling").
//!
//! Upstream, all in `python/sglang/srt/`: `managers/scheduler.py` (`_set_or_validate_priority`,
//! `_add_request_to_queue`, `_get_new_batch_prefill_raw`), `managers/schedule_policy.py`
//! (`_sort_by_priority_and_fcfs`, `_sort_by_longest_output`, `PrefillAdder.preempt_to_schedule`),
//! `managers/schedule_batch.py` (`_get_decode_retraction_order`, `reset_for_retract`) and the
//! flags' checks in `arg_groups/validation_hook.py`.

use crate::cache::ReqId;
use crate::engine::{EngineVersion, SchedulePolicy};
use crate::error::{Error, Result};
use rustc_hash::FxHashMap;
use serde::Serialize;

/// `--retraction-policy`: which running requests a decode short of memory retracts first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum RetractionPolicy {
    /// Fewest outputs first, then the longest prompt (SGLang's default).
    #[default]
    Length,
    /// The least important priority first, then as `length` (needs priority scheduling).
    Priority,
}

/// The priority flags as given (SGLang's names).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PriorityOptions {
    /// `--enable-priority-scheduling`.
    pub enable: bool,
    /// `--schedule-low-priority-values-first`.
    pub low_values_first: bool,
    /// `--priority-scheduling-preemption-threshold`; `None`: SGLang's 10.
    pub preemption_threshold: Option<i64>,
    /// `--disable-priority-preemption`.
    pub disable_preemption: bool,
    /// `--default-priority-value`; `None`: a request sent without a priority is the least
    /// preferred.
    pub default_value: Option<i64>,
    /// `--retraction-policy`; `None`: not given (`length`).
    pub retraction: Option<RetractionPolicy>,
    /// `--abort-on-priority-when-disabled`.
    pub abort_when_disabled: bool,
}

/// SGLang's `--priority-scheduling-preemption-threshold` default (`arg_groups/fields/schedule.py`).
pub const DEFAULT_PREEMPTION_THRESHOLD: i64 = 10;

/// Priority scheduling as a run uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SglangPriority {
    /// Lower values are more important (default: higher ones).
    pub low_values_first: bool,
    /// A waiting request preempts running ones whose priority it beats by more than this;
    /// `None`: preemption off (`--disable-priority-preemption`).
    pub preemption_threshold: Option<i64>,
    /// What a request sent without a priority gets (`None`: the least preferred value,
    /// `-sys.maxsize - 1`, or `sys.maxsize` with low values first).
    pub default_value: Option<i64>,
    /// Retraction takes the least important first (`--retraction-policy priority`).
    pub retract_by_priority: bool,
}

/// Checks the flags as SGLang 0.5.23 does, and refuses what it refuses or what would mean
/// nothing; `Ok(None)`: priority scheduling off.
pub fn resolve(o: &PriorityOptions, version: EngineVersion, policy: SchedulePolicy) -> Result<Option<SglangPriority>> {
    if !o.enable {
        let given = [
            (o.low_values_first, "--schedule-low-priority-values-first"),
            (o.preemption_threshold.is_some(), "--priority-scheduling-preemption-threshold"),
            (o.disable_preemption, "--disable-priority-preemption"),
            (o.default_value.is_some(), "--default-priority-value"),
            (o.retraction == Some(RetractionPolicy::Priority), "--retraction-policy priority"),
        ];
        if o.abort_when_disabled && version == EngineVersion::Sglang051 {
            return Err(Error::invalid(
                "--abort-on-priority-when-disabled",
                "sglang@0.5.1 (0.4.10's scheduling code) has no priority flags: they came with SGLang 0.5.3 and 0.5.4",
            ));
        }
        if let Some((_, flag)) = given.iter().find(|(set, _)| *set) {
            let upstream = if flag.starts_with("--retraction-policy") {
                "SGLang refuses it: \"--retraction-policy priority requires --enable-priority-scheduling\""
            } else {
                "SGLang warns that it has no effect"
            };
            return Err(Error::invalid(
                flag.split(' ').next().unwrap_or(flag),
                format!("means nothing without --enable-priority-scheduling ({upstream})"),
            ));
        }
        return Ok(None);
    }
    if o.abort_when_disabled {
        return Err(Error::invalid(
            "--abort-on-priority-when-disabled",
            "means nothing with --enable-priority-scheduling: it aborts requests carrying a priority only when \
             priority scheduling is off",
        ));
    }
    if version == EngineVersion::Sglang051 {
        return Err(Error::invalid(
            "--enable-priority-scheduling",
            "sglang@0.5.1 (0.4.10's scheduling code) has no priority scheduling: it came with SGLang 0.5.3 \
             (use --engine-version sglang@0.5)",
        ));
    }
    if !matches!(policy, SchedulePolicy::Fcfs | SchedulePolicy::Lof) {
        let name = serde_json::to_value(policy).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
        return Err(Error::invalid(
            "--schedule-policy",
            format!("To use priority scheduling, schedule_policy must be 'fcfs' or 'lof'. '{name}' is not supported. (SGLang's check)"),
        ));
    }
    Ok(Some(SglangPriority {
        low_values_first: o.low_values_first,
        preemption_threshold: (!o.disable_preemption)
            .then_some(o.preemption_threshold.unwrap_or(DEFAULT_PREEMPTION_THRESHOLD)),
        default_value: o.default_value,
        retract_by_priority: o.retraction == Some(RetractionPolicy::Priority),
    }))
}

/// SGLang's message for a request aborted by a full waiting queue (`_abort_on_queued_limit`).
pub const QUEUE_FULL: &str = "The request queue is full.";
/// SGLang's message for a waiting request aborted for a more important arrival.
pub const PRIORITY_ABORT: &str = "The request is aborted by a higher priority request.";
/// SGLang's message for a request sent with a priority under `--abort-on-priority-when-disabled`.
pub const PRIORITY_DISABLED: &str =
    "Using priority is disabled for this server. Please send a new request without a priority.";

/// Refuses a `--max-queued-requests` that cannot be meant: 0, and any bound with
/// prefill/decode pools, where SGLang ignores it.
pub fn check_queue_bound(max: Option<u32>, disaggregated: bool) -> Result<()> {
    match max {
        Some(0) => Err(Error::invalid(
            "--max-queued-requests",
            "0 refuses every request (and SGLang 0.5.23 under --enable-priority-scheduling fails on the first: \
             max() of an empty queue); give at least 1",
        )),
        Some(_) if disaggregated => Err(Error::invalid(
            "--max-queued-requests",
            "means nothing with prefill/decode pools: SGLang ignores it in disaggregation mode",
        )),
        _ => Ok(()),
    }
}

impl SglangPriority {
    /// `priority_sign`: +1 when low values come first, else −1; a request's sort key is
    /// `priority × sign`, the most important lowest.
    fn sign(&self) -> i128 {
        if self.low_values_first {
            1
        } else {
            -1
        }
    }

    /// `_set_or_validate_priority`: the request's priority, or the default for one sent without.
    pub fn effective(&self, priority: Option<i32>) -> i64 {
        priority.map(i64::from).or(self.default_value).unwrap_or(if self.low_values_first {
            i64::MAX
        } else {
            i64::MIN
        })
    }

    /// The queue's sort key of `priority`: the most important lowest.
    pub fn key(&self, priority: i64) -> i128 {
        i128::from(priority) * self.sign()
    }

    /// The line the run report's engine settings add.
    pub fn describe(&self) -> String {
        format!(
            " · priority scheduling ({} values first, {}{})",
            if self.low_values_first { "low" } else { "high" },
            match self.preemption_threshold {
                Some(t) => format!("preemption above a difference of {t}"),
                None => "no preemption".to_string(),
            },
            if self.retract_by_priority { ", retraction by priority" } else { "" }
        )
    }
}

/// What the scheduler keeps of one request it holds (waiting or running).
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// The priority it is scheduled by ([`SglangPriority::effective`]).
    pub priority: i64,
    /// `wait_queue_entry_time`, as an order: stamped at every (re-)entry to the waiting queue.
    pub entered: u64,
    /// `len(full_untruncated_fill_ids)` and `prefix_len` as its last prefix match left them (0
    /// before the first, and the prefix 0 again after a retraction or preemption): the stale
    /// figures `preempt_to_schedule` reads, since it runs before the candidate is matched.
    pub fill: u32,
    pub prefix: u32,
}

/// Priority scheduling's state: the settings and an entry per request held.
#[derive(Debug, Clone)]
pub struct Priorities {
    pub cfg: SglangPriority,
    entries: FxHashMap<ReqId, Entry>,
    stamps: u64,
}

impl Priorities {
    pub fn new(cfg: SglangPriority) -> Self {
        Self { cfg, entries: FxHashMap::default(), stamps: 0 }
    }

    /// `_add_request_to_queue` for a new request.
    pub fn arrive(&mut self, id: ReqId, priority: Option<i32>) {
        let priority = self.cfg.effective(priority);
        self.entries.insert(id, Entry { priority, entered: 0, fill: 0, prefix: 0 });
        self.stamp(id);
    }

    /// `_add_request_to_queue` again (a retracted or preempted request): a fresh entry time and
    /// (`reset_for_retract`) no prefix.
    pub fn requeue(&mut self, id: ReqId) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.prefix = 0;
        }
        self.stamp(id);
    }

    fn stamp(&mut self, id: ReqId) {
        self.stamps += 1;
        if let Some(e) = self.entries.get_mut(&id) {
            e.entered = self.stamps;
        }
    }

    /// `init_next_round_input`: the request was matched with `fill` tokens known, `prefix` hit.
    pub fn matched(&mut self, id: ReqId, fill: u32, prefix: u32) {
        if let Some(e) = self.entries.get_mut(&id) {
            (e.fill, e.prefix) = (fill, prefix);
        }
    }

    /// The request left the scheduler.
    pub fn forget(&mut self, id: ReqId) {
        self.entries.remove(&id);
    }

    pub fn entry(&self, id: ReqId) -> Entry {
        self.entries[&id]
    }

    /// `_sort_by_priority_and_fcfs`: by (priority × sign, entry time).
    pub fn sort_fcfs(&self, waiting: &mut [ReqId]) {
        waiting.sort_by_key(|&id| {
            let e = self.entries[&id];
            (self.cfg.key(e.priority), e.entered)
        });
    }

    /// `_sort_by_longest_output` with priority: by (priority × sign, −max_new_tokens), stable.
    pub fn sort_lof(&self, waiting: &mut [ReqId], max_new: impl Fn(ReqId) -> u32) {
        waiting.sort_by_key(|&id| (self.cfg.key(self.entries[&id].priority), std::cmp::Reverse(max_new(id))));
    }

    /// `_get_decode_retraction_order` under `--retraction-policy priority`: the part of the
    /// keep order (most preferred to keep first) that comes before the length rule; 0 for all
    /// under `length`.
    pub fn retraction_rank(&self, id: ReqId) -> i128 {
        if self.cfg.retract_by_priority {
            -self.cfg.key(self.entries[&id].priority)
        } else {
            0
        }
    }

    /// `preempt_to_schedule`'s choice for the waiting `candidate`: the running requests it
    /// preempts, least important first (the most recently queued first among equals), taken
    /// while the candidate beats each by more than the threshold, until the candidate's demand
    /// (`need`: its stale extend length plus `min(max_new_tokens, 4096)` less the budget left)
    /// is covered by their reservations (`reserve`); empty when it is not covered or no running
    /// request qualifies.
    pub fn victims(
        &self,
        candidate: ReqId,
        running: &[ReqId],
        mut need: f64,
        reserve: impl Fn(ReqId) -> f64,
    ) -> Vec<ReqId> {
        let Some(threshold) = self.cfg.preemption_threshold else { return Vec::new() };
        let new = self.entries[&candidate].priority;
        let mut order: Vec<ReqId> = running.to_vec();
        order.sort_by_key(|&id| {
            let e = self.entries[&id];
            (-self.cfg.key(e.priority), std::cmp::Reverse(e.entered))
        });
        let mut chosen = Vec::new();
        for id in order {
            let diff = (i128::from(new) - i128::from(self.entries[&id].priority)) * -self.cfg.sign();
            if diff <= i128::from(threshold) {
                break;
            }
            chosen.push(id);
            need -= reserve(id);
            if need <= 0.0 {
                break;
            }
        }
        if need > 0.0 {
            chosen.clear();
        }
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(low_first: bool, threshold: Option<i64>) -> SglangPriority {
        SglangPriority {
            low_values_first: low_first,
            preemption_threshold: threshold,
            default_value: None,
            retract_by_priority: false,
        }
    }

    #[test]
    fn a_request_without_priority_is_the_least_preferred() {
        let high = cfg(false, Some(10));
        assert_eq!(high.effective(None), i64::MIN);
        assert_eq!(cfg(true, Some(10)).effective(None), i64::MAX);
        assert_eq!(SglangPriority { default_value: Some(3), ..high }.effective(None), 3);
        assert_eq!(high.effective(Some(-4)), -4);
        // Higher values first by default: 5 sorts before 1, and both before a request without one.
        assert!(high.key(5) < high.key(1) && high.key(1) < high.key(i64::MIN));
    }

    #[test]
    fn fcfs_sorts_by_priority_then_entry_and_a_requeue_goes_behind_its_class() {
        let mut p = Priorities::new(cfg(false, Some(10)));
        for (id, prio) in [(0, Some(1)), (1, Some(5)), (2, None), (3, Some(1))] {
            p.arrive(id, prio);
        }
        let mut w = vec![0, 1, 2, 3];
        p.sort_fcfs(&mut w);
        assert_eq!(w, vec![1, 0, 3, 2]);
        p.requeue(0);
        p.sort_fcfs(&mut w);
        assert_eq!(w, vec![1, 3, 0, 2], "re-queued request 0 now enters after 3");
    }

    #[test]
    fn victims_need_more_than_the_threshold_and_stop_once_the_demand_is_covered() {
        let mut p = Priorities::new(cfg(false, Some(10)));
        // Running: 0 (priority 0), 1 (priority 0, queued later), 2 (priority 10), 3 (priority 5).
        for (id, prio) in [(0, Some(0)), (1, Some(0)), (2, Some(10)), (3, Some(5)), (9, Some(20))] {
            p.arrive(id, prio);
        }
        let running = [0, 1, 2, 3];
        // 20 − 10 = 10 is not above 10: request 2 is never a victim; least important first, the
        // later-queued first among equals.
        assert_eq!(p.victims(9, &running, 100.0, |_| 40.0), vec![1, 0, 3]);
        assert_eq!(p.victims(9, &running, 50.0, |_| 40.0), vec![1, 0]);
        assert_eq!(p.victims(9, &running, -5.0, |_| 40.0), vec![1], "one victim even when nothing is needed");
        assert!(p.victims(9, &running, 200.0, |_| 40.0).is_empty(), "not enough to cover the demand");
        assert!(Priorities::new(cfg(false, None)).victims(9, &[], 0.0, |_| 0.0).is_empty());
        // Low values first: 1 beats 20 by 19.
        let mut q = Priorities::new(cfg(true, Some(10)));
        q.arrive(0, Some(20));
        q.arrive(1, Some(1));
        assert_eq!(q.victims(1, &[0], 1.0, |_| 5.0), vec![0]);
        assert!(q.victims(0, &[1], 1.0, |_| 5.0).is_empty());
    }

    #[test]
    fn flags_are_refused_as_sglang_refuses_them() {
        let on = PriorityOptions { enable: true, ..Default::default() };
        let v = EngineVersion::Sglang05;
        let r = resolve(&on, v, SchedulePolicy::Fcfs).unwrap().unwrap();
        assert_eq!(r.preemption_threshold, Some(10));
        assert!(resolve(&on, v, SchedulePolicy::Lof).unwrap().is_some());
        let e = resolve(&on, v, SchedulePolicy::Lpm).unwrap_err().to_string();
        assert!(e.contains("schedule_policy must be 'fcfs' or 'lof'. 'lpm' is not supported"), "{e}");
        assert!(resolve(&on, EngineVersion::Sglang051, SchedulePolicy::Fcfs)
            .unwrap_err()
            .to_string()
            .contains("0.5.3"));
        let off = PriorityOptions { retraction: Some(RetractionPolicy::Priority), ..Default::default() };
        assert!(resolve(&off, v, SchedulePolicy::Fcfs)
            .unwrap_err()
            .to_string()
            .contains("requires --enable-priority-scheduling"));
        let off = PriorityOptions { preemption_threshold: Some(3), ..Default::default() };
        assert!(resolve(&off, v, SchedulePolicy::Fcfs).unwrap_err().to_string().contains("means nothing"));
        assert_eq!(resolve(&PriorityOptions::default(), v, SchedulePolicy::Lpm).unwrap(), None);
        let both = PriorityOptions { abort_when_disabled: true, ..on };
        assert!(resolve(&both, v, SchedulePolicy::Fcfs)
            .unwrap_err()
            .to_string()
            .contains("only when priority scheduling is off"));
        let abort = PriorityOptions { abort_when_disabled: true, ..Default::default() };
        assert_eq!(resolve(&abort, v, SchedulePolicy::Lpm).unwrap(), None, "taken without priority scheduling");
        assert!(resolve(&abort, EngineVersion::Sglang051, SchedulePolicy::Fcfs).is_err());
        let no_preempt = PriorityOptions { disable_preemption: true, ..on };
        assert_eq!(resolve(&no_preempt, v, SchedulePolicy::Fcfs).unwrap().unwrap().preemption_threshold, None);
    }
}
