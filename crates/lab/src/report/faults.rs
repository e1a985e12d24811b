//! The instance failures' part of a run report ([`cachesim_core::cluster::faults`]): one row
//! per failure (when, which instance, when it served again, the requests it held, how many
//! continued elsewhere and how many failed, the tokens computed again) and the totals, with the
//! completed requests that migrated beside the others (how much a failure delayed them), as
//! text and as the JSON `instance_failures` entry.

use cachesim_core::cluster::faults::FaultPlan;
use cachesim_core::metrics::{RequestRecord, Stats};
use cachesim_core::sim::{FaultRecord, SimResult};
use cachesim_core::text::thousands;
use serde::Serialize;
use std::fmt::Write;

/// The JSON `instance_failures` entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultsReport {
    pub recovery_s: f64,
    pub migration_limit: u32,
    /// Each failure, in time order.
    pub events: Vec<FaultRecord>,
    /// Requests the failures took from their instance (a request lost twice counts twice).
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
    /// Instance-seconds down within the run (from each failure to its restart or the run's end).
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
        lost: sum(|e| e.running + e.waiting),
        migrated: sum(|e| e.migrated),
        failed: sum(|e| e.failed),
        failed_no_instance: no_instance,
        completed_after_migrating: migrated_records.len() as u64,
        median_e2e_migrated_ms: median(migrated_records),
        median_e2e_others_ms: median(others),
        down_instance_s: sim.faults.iter().map(|e| (e.back_s.min(end_s) - e.time_s).max(0.0)).sum(),
    }
}

/// The text block.
pub fn text(r: &FaultsReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{:=^50}", " Instance failures ");
    let _ = writeln!(
        s,
        "{:>10} {:>8} {:>10} {:>8} {:>8} {:>9} {:>7} {:>11}",
        "failed s", "instance", "back s", "running", "waiting", "migrated", "failed", "recomputed"
    );
    for e in &r.events {
        let _ = writeln!(
            s,
            "{:>10.2} {:>8} {:>10.2} {:>8} {:>8} {:>9} {:>7} {:>11}",
            e.time_s,
            e.instance,
            e.back_s,
            thousands(e.running as u64),
            thousands(e.waiting as u64),
            thousands(e.migrated as u64),
            thousands(e.failed as u64),
            thousands(e.recomputed_tokens)
        );
    }
    let _ = writeln!(
        s,
        "{} failure{} (recovery {} s, migration limit {}): {} requests lost, {} migrated, {} failed; {} failed with no \
         instance serving; {:.1} instance-seconds down",
        thousands(r.events.len() as u64),
        if r.events.len() == 1 { "" } else { "s" },
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
