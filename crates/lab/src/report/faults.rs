//! The instance failures' part of a run report ([`cachesim_core::cluster::faults`]): one row
//! per stop, a crash or a rolling restart's (when, which instance, how long it drained, when it
//! served again, the requests it still held, how many continued elsewhere and how many failed,
//! the tokens computed again) and the totals, with the completed requests that migrated beside
//! the others (how much a stop delayed them), as text and as the JSON `instance_failures`
//! entry.

use cachesim_core::cluster::faults::FaultPlan;
use cachesim_core::metrics::{RequestRecord, Stats};
use cachesim_core::sim::{FaultRecord, SimResult, StopKind};
use cachesim_core::text::thousands;
use serde::Serialize;
use std::fmt::Write;

/// The JSON `instance_failures` entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultsReport {
    pub recovery_s: f64,
    pub migration_limit: u32,
    /// Each stop, in time order.
    pub events: Vec<FaultRecord>,
    /// Crashes, and a rolling restart's stops.
    pub failures: u64,
    pub restarts: u64,
    /// Requests the stops took from their instance (a request lost twice counts twice).
    pub lost: u64,
    pub migrated: u64,
    /// Requests that failed because their instance did, and because none was serving.
    pub failed: u64,
    pub failed_no_instance: u64,
    /// Completed requests that migrated at least once, and the median E2E latency (ms) of those
    /// and of the other completed requests (`null` without any).
    pub completed_after_migrating: u64,
    pub median_e2e_migrated_ms: Option<f64>,
    pub median_e2e_others_ms: Option<f64>,
    /// Instance-seconds down within the run (from each stop to its restart or the run's end).
    pub down_instance_s: f64,
}

/// The report of `sim`'s failures under `plan`, over a run that ended at `end_s` (seconds).
pub fn report(plan: &FaultPlan, sim: &SimResult, end_s: f64) -> FaultsReport {
    let sum = |f: fn(&FaultRecord) -> u32| sim.faults.iter().map(|e| f(e) as u64).sum::<u64>();
    let moved = |r: &&RequestRecord| sim.migrations.get(r.id as usize).is_some_and(|&m| m > 0);
    let median = |rs: Vec<&RequestRecord>| {
        (!rs.is_empty()).then(|| Stats::of(&mut rs.iter().map(|r| r.latency_s()).collect::<Vec<_>>()).ms().median)
    };
    let (migrated_records, others): (Vec<&RequestRecord>, Vec<&RequestRecord>) = sim.records.iter().partition(moved);
    let no_instance = sim.failures.get(&cachesim_core::engine::frontend::FailReason::NoInstance).map_or(0, |f| f.0);
    FaultsReport {
        recovery_s: plan.recovery_s,
        migration_limit: plan.migration_limit,
        events: sim.faults.clone(),
        failures: sim.faults.iter().filter(|e| e.kind == StopKind::Failure).count() as u64,
        restarts: sim.faults.iter().filter(|e| e.kind == StopKind::Restart).count() as u64,
        lost: sum(|e| e.running + e.waiting),
        migrated: sum(|e| e.migrated),
        failed: sum(|e| e.failed),
        failed_no_instance: no_instance,
        completed_after_migrating: migrated_records.len() as u64,
        median_e2e_migrated_ms: median(migrated_records),
        median_e2e_others_ms: median(others),
        down_instance_s: sim.faults.iter().fold(0.0, |s, e| s + (e.back_s.min(end_s) - e.time_s).max(0.0)),
    }
}

/// The text block.
pub fn text(r: &FaultsReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{:=^50}", " Instance failures ");
    let restarts = r.restarts > 0;
    let _ = write!(s, "{:>10} {:>8}", "stopped s", "instance");
    if restarts {
        let _ = write!(s, " {:>8} {:>9}", "kind", "drained s");
    }
    let _ = writeln!(
        s,
        " {:>10} {:>8} {:>8} {:>9} {:>7} {:>11}",
        "back s", "running", "waiting", "migrated", "failed", "recomputed"
    );
    for e in &r.events {
        let _ = write!(s, "{:>10.2} {:>8}", e.time_s, e.instance);
        if restarts {
            let kind = match e.kind {
                StopKind::Failure => "failure",
                StopKind::Restart => "restart",
            };
            let _ = write!(s, " {kind:>8} {:>9.2}", e.drain_s);
        }
        let _ = writeln!(
            s,
            " {:>10.2} {:>8} {:>8} {:>9} {:>7} {:>11}",
            e.back_s,
            thousands(e.running as u64),
            thousands(e.waiting as u64),
            thousands(e.migrated as u64),
            thousands(e.failed as u64),
            thousands(e.recomputed_tokens)
        );
    }
    let count = |n: u64, what: &str| format!("{} {what}{}", thousands(n), if n == 1 { "" } else { "s" });
    let stops = match (r.failures, r.restarts) {
        (f, 0) => count(f, "failure"),
        (0, k) => count(k, "restart"),
        (f, k) => format!("{} and {}", count(f, "failure"), count(k, "restart")),
    };
    let _ = writeln!(
        s,
        "{stops} (recovery {} s, migration limit {}): {} requests lost, {} migrated, {} failed; {} failed with no \
         instance serving; {:.1} instance-seconds down",
        r.recovery_s,
        r.migration_limit,
        thousands(r.lost),
        thousands(r.migrated),
        thousands(r.failed),
        thousands(r.failed_no_instance),
        r.down_instance_s
    );
    if let (Some(m), Some(o)) = (r.median_e2e_migrated_ms, r.median_e2e_others_ms) {
        let _ = writeln!(
            s,
            "Completed after migrating: {} requests, median E2E {m:.2} ms against {o:.2} ms for the others",
            thousands(r.completed_after_migrating)
        );
    }
    let _ = writeln!(s, "{:=^50}", "");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: StopKind, time_s: f64, back_s: f64, instance: u32, drain_s: f64) -> FaultRecord {
        FaultRecord { kind, time_s, back_s, instance, drain_s, ..FaultRecord::default() }
    }

    #[test]
    fn the_table_names_the_kind_of_stop_only_when_a_restart_is_in_it() {
        let crash = FaultRecord {
            running: 3,
            waiting: 1,
            migrated: 2,
            failed: 2,
            ..record(StopKind::Failure, 10.0, 70.0, 1, 0.0)
        };
        let r = FaultsReport {
            recovery_s: 60.0,
            migration_limit: 1,
            events: vec![crash],
            failures: 1,
            restarts: 0,
            lost: 4,
            migrated: 2,
            failed: 2,
            failed_no_instance: 0,
            completed_after_migrating: 2,
            median_e2e_migrated_ms: Some(900.0),
            median_e2e_others_ms: Some(800.0),
            down_instance_s: 25.0,
        };
        let t = text(&r);
        assert!(
            !t.contains("kind") && t.contains("     10.00        1      70.00        3        1         2       2"),
            "{t}"
        );
        assert!(
            t.contains("1 failure (recovery 60 s, migration limit 1): 4 requests lost, 2 migrated, 2 failed"),
            "{t}"
        );
        assert!(t.contains("median E2E 900.00 ms against 800.00 ms"), "{t}");
        let both = FaultsReport {
            events: vec![crash, record(StopKind::Restart, 20.0, 80.0, 0, 1.5)],
            restarts: 1,
            median_e2e_migrated_ms: None,
            ..r
        };
        let t = text(&both);
        assert!(t.contains("kind drained s") && t.contains(" restart      1.50"), "{t}");
        assert!(t.contains("1 failure and 1 restart (recovery 60 s"), "{t}");
        assert!(!t.contains("Completed after migrating"), "{t}");
    }
}
