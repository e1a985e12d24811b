//! Hand-computed scenarios of instance failures ([`crate::cluster::faults`]): a request that
//! migrates mid-stream and finishes on the other instance, the same failure without migration,
//! a lone instance whose restart comes back with an empty cache while a request sent in the
//! outage fails, a rolling restart that drains each instance in turn (and one whose drain times
//! out), and a property: every request sent completes or fails, under random failures and
//! restarts, with the same figures for the same seed.

use super::tests::{cfg, workload, COST};
use super::*;
use crate::cluster::faults::{FailAt, FaultPlan};
use crate::cluster::router::{build, RouterParams};
use proptest::prelude::*;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn plan(fail_at: &[(f64, u32)], recovery_s: f64, migration_limit: u32) -> FaultPlan {
    FaultPlan {
        fail_at: fail_at.iter().map(|&(time_s, instance)| FailAt { time_s, instance }).collect(),
        mtbf_s: None,
        recovery_s,
        migration_limit,
        rolling_restart_s: None,
        drain_timeout_s: 30.0,
        seed: 0,
    }
}

fn cluster(w: &Workload, sends: &[(u32, f64)], n: usize, kind: RouterKind, faults: &FaultPlan) -> SimResult {
    let c = cfg(8, 1000, None);
    let spec = InstanceSpec { role: Role::Unified, engine: c.engine, cache: c.cache, cost: &COST };
    let mut router = build(kind, RouterParams::default(), n);
    drive(
        w,
        sends,
        &Front::of(&c),
        &vec![spec; n],
        router.as_mut(),
        None,
        Fleet { faults: Some(faults), autoscale: None, store: None },
        Keep::default(),
        &|_, _| (),
    )
}

fn rec(r: &SimResult, id: u32) -> &crate::metrics::RequestRecord {
    r.records.iter().find(|x| x.id == id).expect("completed")
}

/// A (10 tokens, 5 out) on instance 0 and B (20 tokens, 5 out) on instance 1, round robin.
fn pair() -> Workload {
    workload(&[((0..10).collect(), 5), ((100..120).collect(), 5)])
}

#[test]
fn a_request_migrates_mid_stream_and_finishes_on_the_other_instance() {
    // Instance 1: B's prefill of 20 ends at 0.030 (token 1), a decode at 0.042 (token 2); the
    // failure at 0.045 ends the next decode unfinished. B is sent on with its 22 known tokens
    // (prompt + 2 streamed); the turn passes over instance 1 (down), so instance 0 takes it.
    // Instance 0: A's prefill ends at 0.020, decodes at 0.032, 0.044, 0.056 (token 4); the step
    // from 0.056 holds A's decode and B's prefill of 22: 0.01 + 0.022 + 0.002 = 0.034, to
    // 0.090 (A's token 5, B's token 3); B decodes alone at 0.102 and 0.114.
    let r = cluster(&pair(), &[(0, 0.0), (1, 0.0)], 2, RouterKind::RoundRobin, &plan(&[(0.045, 1)], 1.0, 1));
    assert_eq!((r.records.len(), r.failed), (2, 0));
    let (a, b) = (rec(&r, 0), rec(&r, 1));
    assert!(close(a.latency_s(), 0.090), "{a:?}");
    assert!(close(b.ttft_s(), 0.030), "the first token came from instance 1: {b:?}");
    assert!(close(b.latency_s(), 0.114), "{b:?}");
    assert_eq!(b.output_tokens, 5);
    assert_eq!(r.assigned[..2], [0, 0], "B now belongs to instance 0");
    assert_eq!(r.migrations, [0, 1]);
    let f = r.faults[0];
    assert_eq!((f.instance, f.running, f.waiting, f.migrated, f.failed, f.recomputed_tokens), (1, 1, 0, 1, 0, 22));
    assert!(close(f.time_s, 0.045) && close(f.back_s, 1.045));
    // Instance 1 was busy from 0 to the failure only: 0.030 + 0.012 + 0.003.
    assert!(close(r.instances[1].busy_s, 0.045), "{:?}", r.instances[1]);
    assert_eq!(r.instances.iter().map(|s| s.requests).collect::<Vec<_>>(), [2, 1]);
    // The client saw one long gap: token 2 at 0.042, token 3 at 0.090.
    assert!(r.log.clone().gaps().iter().any(|&(g, n)| close(g, 0.048) && n == 1));
}

#[test]
fn without_migration_the_lost_request_fails_and_the_other_is_untouched() {
    let r = cluster(&pair(), &[(0, 0.0), (1, 0.0)], 2, RouterKind::RoundRobin, &plan(&[(0.045, 1)], 1.0, 0));
    assert_eq!((r.records.len(), r.failed), (1, 1));
    assert!(close(rec(&r, 0).latency_s(), 0.068), "A runs alone: 0.020 + 4 × 0.012");
    assert_eq!(r.failures[&FailReason::InstanceFailed].0, 1);
    let f = r.faults[0];
    assert_eq!((f.running, f.migrated, f.failed, f.recomputed_tokens), (1, 0, 1, 0));
}

#[test]
fn a_lone_instance_restarts_empty_and_a_request_sent_while_it_is_down_fails() {
    // A fails with its instance at 0.025 (no other instance to migrate to); C arrives at 0.05,
    // during the outage; the instance serves again at 0.125 with an empty cache, so D (A's
    // prompt, whose two full blocks of 4 were cached) reuses nothing.
    let w = workload(&[((0..10).collect(), 5), ((200..210).collect(), 2), ((0..10).collect(), 2)]);
    let r = cluster(&w, &[(0, 0.0), (1, 0.05), (2, 0.2)], 1, RouterKind::RoundRobin, &plan(&[(0.025, 0)], 0.1, 3));
    assert_eq!((r.records.len(), r.failed), (1, 2));
    assert_eq!(r.failures[&FailReason::InstanceFailed].0, 1);
    assert_eq!(r.failures[&FailReason::NoInstance].0, 1);
    let d = rec(&r, 2);
    assert_eq!(d.cached_prompt_tokens, 0, "the cache died with the instance: {d:?}");
    assert!(close(d.ttft_s(), 0.020), "{d:?}");
    assert_eq!(r.faults.len(), 1);
    assert_eq!((r.faults[0].migrated, r.faults[0].failed), (0, 1));
    // Without the failure D would reuse A's two cached blocks.
    let none = cluster(&w, &[(0, 0.0), (1, 0.05), (2, 0.2)], 1, RouterKind::RoundRobin, &plan(&[], 0.1, 0));
    assert_eq!(rec(&none, 2).cached_prompt_tokens, 8);
}

#[test]
fn a_planned_failure_of_an_instance_already_down_does_nothing() {
    let r = cluster(&pair(), &[(0, 0.0), (1, 0.0)], 2, RouterKind::RoundRobin, &plan(&[(0.045, 1), (0.05, 1)], 1.0, 1));
    assert_eq!(r.faults.len(), 1);
    assert_eq!(r.records.len(), 2);
}

#[test]
fn a_rolling_restart_drains_each_instance_in_turn_and_loses_nothing() {
    // Instance 0 drains from 0.025: out of the router's list, it finishes A (its last token at
    // 0.068, as without the restart) and stops then; C (sent at 0.05) goes to instance 1. Back at
    // 0.168, instance 1 drains in its turn: empty by then, it stops at once and is back at 0.268.
    // D, sent at 0.5, finds both serving.
    let w = workload(&[
        ((0..10).collect(), 5),
        ((100..120).collect(), 5),
        ((200..210).collect(), 2),
        ((300..310).collect(), 2),
    ]);
    let rolling = FaultPlan { rolling_restart_s: Some(0.025), ..plan(&[], 0.1, 0) };
    let r = cluster(&w, &[(0, 0.0), (1, 0.0), (2, 0.05), (3, 0.5)], 2, RouterKind::RoundRobin, &rolling);
    assert_eq!((r.records.len(), r.failed), (4, 0));
    assert!(close(rec(&r, 0).latency_s(), 0.068));
    assert_eq!(r.assigned, [0, 1, 1, 0]);
    let kinds: Vec<(StopKind, u32)> = r.faults.iter().map(|f| (f.kind, f.instance)).collect();
    assert_eq!(kinds, [(StopKind::Restart, 0), (StopKind::Restart, 1)]);
    let (a, b) = (r.faults[0], r.faults[1]);
    assert!(close(a.time_s, 0.068) && close(a.drain_s, 0.043) && close(a.back_s, 0.168), "{a:?}");
    assert!(close(b.time_s, 0.168) && close(b.drain_s, 0.0) && close(b.back_s, 0.268), "{b:?}");
    assert!(r.faults.iter().all(|f| f.running + f.waiting == 0));
}

#[test]
fn a_drain_that_times_out_loses_what_is_left() {
    // The drain timeout of 0.01 stops instance 0 at 0.035 with A decoding (2 tokens streamed):
    // A migrates to instance 1 (or fails without migration).
    for (limit, completed) in [(1, 2), (0, 1)] {
        let short = FaultPlan { rolling_restart_s: Some(0.025), drain_timeout_s: 0.01, ..plan(&[], 0.1, limit) };
        let r = cluster(&pair(), &[(0, 0.0), (1, 0.0)], 2, RouterKind::RoundRobin, &short);
        let f = r.faults[0];
        assert_eq!((f.kind, f.instance, f.running, f.migrated), (StopKind::Restart, 0, 1, limit), "{f:?}");
        assert!(close(f.time_s, 0.035) && close(f.drain_s, 0.01), "{f:?}");
        assert_eq!(r.records.len(), completed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Sent = completed + failed under random failures and any router; a request migrates at
    /// most the limit; the same seed gives the same run.
    #[test]
    fn every_request_completes_or_fails_under_random_failures(
        reqs in proptest::collection::vec((1u32..40, 1u32..12, 0u32..4), 1..24),
        n in 1usize..4,
        kind in 0usize..RouterKind::ALL.len(),
        mtbf in 0.01f64..0.5,
        recovery in 0.0f64..0.2,
        limit in 0u32..3,
        seed in 0u64..1000,
        rolling in proptest::bool::ANY,
        drain in 0.0f64..0.3,
    ) {
        // Prompts of a shared prefix (group g) and their own tail; sends 10 ms apart.
        let specs: Vec<(Vec<u32>, u32)> = reqs
            .iter()
            .enumerate()
            .map(|(i, &(len, out, g))| ((0..len).map(|t| if t < len / 2 { g * 1000 + t } else { 100_000 + i as u32 * 100 + t }).collect(), out))
            .collect();
        let w = workload(&specs);
        let sends: Vec<(u32, f64)> = (0..specs.len() as u32).map(|i| (i, i as f64 * 0.01)).collect();
        let faults = FaultPlan {
            mtbf_s: Some(mtbf),
            seed,
            rolling_restart_s: rolling.then_some(0.05),
            drain_timeout_s: drain,
            ..plan(&[], recovery, limit)
        };
        let r = cluster(&w, &sends, n, RouterKind::ALL[kind], &faults);
        prop_assert_eq!(r.records.len() as u64 + r.failed, sends.len() as u64);
        prop_assert_eq!(r.failures.values().map(|f| f.0).sum::<u64>(), r.failed);
        prop_assert!(r.migrations.iter().all(|&m| m <= limit));
        for x in &r.records {
            prop_assert_eq!(x.output_tokens, specs[x.id as usize].1);
            prop_assert!(x.last_token_s >= x.first_token_s && x.first_token_s >= x.send_s);
        }
        let lost: u64 = r.faults.iter().map(|f| (f.running + f.waiting) as u64).sum();
        let settled: u64 = r.faults.iter().map(|f| (f.migrated + f.failed) as u64).sum();
        prop_assert_eq!(lost, settled);
        let again = cluster(&w, &sends, n, RouterKind::ALL[kind], &faults);
        prop_assert_eq!(format!("{:?}", again.records), format!("{:?}", r.records));
        prop_assert_eq!(again.faults, r.faults);
    }
}
