//! Hand-computed scenarios of several instances on one clock: round-robin splitting a pair of
//! requests over two instances (each then runs alone), least-load following completions,
//! the frontend's rejection still passing through the router, and the one-instance driver giving
//! the same result as the cluster driver with one instance.

use super::tests::{cfg, workload, COST};
use super::*;
use crate::cluster::router::{build, RouterParams};

fn cluster(w: &Workload, sends: &[(u32, f64)], n: usize, kind: RouterKind, c: &SimConfig) -> SimResult {
    let spec = InstanceSpec { engine: c.engine, cache: c.cache, cost: &COST };
    let mut router = build(kind, RouterParams::default(), n);
    drive(w, sends, &Front::of(c), &vec![spec; n], router.as_mut(), Keep::default(), &|_, _| ())
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn round_robin_over_two_instances_runs_each_request_alone() {
    let w = workload(&[((0..10).collect(), 3), ((100..120).collect(), 3)]);
    let sends = [(0, 0.0), (1, 0.0)];
    let one = cluster(&w, &sends, 1, RouterKind::RoundRobin, &cfg(8, 1000, None));
    let two = cluster(&w, &sends, 2, RouterKind::RoundRobin, &cfg(8, 1000, None));
    // One instance: one prefill of 30 (0.040), two decodes of two (0.014 each).
    for x in &one.records {
        assert!(close(x.ttft_s(), 0.040) && close(x.latency_s(), 0.068), "{x:?}");
    }
    // Two: A prefills 10 (0.020) then decodes alone (0.012 each); B prefills 20 (0.030).
    let a = two.records.iter().find(|r| r.id == 0).unwrap();
    let b = two.records.iter().find(|r| r.id == 1).unwrap();
    assert!(close(a.ttft_s(), 0.020) && close(a.latency_s(), 0.044), "{a:?}");
    assert!(close(b.ttft_s(), 0.030) && close(b.latency_s(), 0.054), "{b:?}");
    assert_eq!(two.assigned[..2], [0, 1]);
    assert_eq!(two.steps, 6);
    assert_eq!(two.instances.iter().map(|s| s.requests).collect::<Vec<_>>(), [1, 1]);
    assert_eq!(two.instances.iter().map(|s| s.steps).collect::<Vec<_>>(), [3, 3]);
    assert!(close(two.instances[0].busy_s, 0.044) && close(two.instances[1].busy_s, 0.054));
    assert!(close(two.load.busy_s, 0.098));
    // The completions come out in time order across instances.
    assert_eq!(two.records.iter().map(|r| r.id).collect::<Vec<_>>(), [0, 1]);
}

#[test]
fn least_load_counts_completions() {
    // A (long output) goes to 0, B to 1; B finishes first, so C (sent after that) goes to 1,
    // and D, sent while C runs, to the instance with fewer in flight: 0 and 1 both hold one,
    // so the lowest index.
    let w = workload(&[
        ((0..10).collect(), 20),
        ((100..110).collect(), 1),
        ((200..210).collect(), 1),
        ((300..310).collect(), 1),
    ]);
    let r = cluster(&w, &[(0, 0.0), (1, 0.0), (2, 0.05), (3, 0.05)], 2, RouterKind::LeastLoad, &cfg(8, 1000, None));
    assert_eq!(r.assigned, [0, 1, 1, 0]);
}

#[test]
fn the_one_instance_driver_is_the_cluster_driver_with_one_instance() {
    let w = workload(&[((0..10).collect(), 3), ((0..20).collect(), 5), ((100..140).collect(), 2)]);
    let sends = [(0, 0.0), (1, 0.001), (2, 0.002)];
    let c = cfg(2, 16, Some(12));
    let a = run(&w, &sends, &c, &COST, Keep::default());
    let b = cluster(&w, &sends, 1, RouterKind::LeastLoad, &c);
    assert_eq!(a.records, b.records);
    assert_eq!(a.steps, b.steps);
}

#[test]
fn rejected_requests_pass_through_the_router_and_free_its_count() {
    let w = workload(&[((0..10).collect(), 3), ((0..500).collect(), 3), ((100..110).collect(), 3)]);
    let limits = crate::engine::frontend::RequestLimits { max_model_len: 100, pool_tokens: 1000 };
    let c = SimConfig { limits: Some(limits), ..cfg(8, 1000, None) };
    let r = cluster(&w, &[(0, 0.0), (1, 0.0), (2, 0.0)], 2, RouterKind::RoundRobin, &c);
    assert_eq!(r.failed, 1);
    assert_eq!(r.records.len(), 2);
    assert_eq!(r.assigned, [0, 1, 0]);
    assert_eq!(r.instances.iter().map(|s| s.requests).collect::<Vec<_>>(), [2, 1]);
}
