//! Criterion bench of the router policies alone: the Mooncake conversation trace (12,031
//! requests, prompts of thousands of tokens) routed to 16 instances at its send times, each
//! request finishing 256 arrivals later, against a fake view of the instances (instance
//! `seq % 16` holds half of each prompt). Throughput: routed requests per wall second. Skipped
//! when the trace is absent.

use cachesim::cluster::router::{build, Arrival, InstanceView, RouterKind, RouterParams};
use cachesim::workload::{BuildOptions, SeqId, Workload};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::collections::VecDeque;

const INSTANCES: usize = 16;
const IN_FLIGHT: usize = 256;

struct FakeView;

impl InstanceView for FakeView {
    fn num_instances(&self) -> usize {
        INSTANCES
    }
    fn cached_prefix(&self, i: usize, seq: SeqId, known: usize) -> usize {
        if seq as usize % INSTANCES == i {
            known / 2
        } else {
            0
        }
    }
    fn held_tokens(&self, _i: usize) -> u64 {
        0
    }
    fn queued(&self, _i: usize) -> u32 {
        0
    }
}

/// Routes every request of `w` through a fresh `kind` router; returns requests routed by prefix.
fn route_all(w: &Workload, kind: RouterKind) -> usize {
    let mut r = build(kind, RouterParams::default(), INSTANCES);
    let mut open = VecDeque::with_capacity(IN_FLIGHT + 1);
    let mut by_prefix = 0;
    for (k, q) in w.requests.iter().enumerate() {
        let now = q.arrival_ms.unwrap_or(0.0) / 1000.0;
        let a = Arrival::of(k as u32, q, &w.store, now);
        let d = r.route(&a, &FakeView);
        by_prefix += (d.basis == cachesim::cluster::router::Basis::Prefix) as usize;
        open.push_back((k as u32, d.instance));
        if open.len() > IN_FLIGHT {
            let (id, i) = open.pop_front().unwrap_or_default();
            r.prefill_done(id, i, now);
            r.response_ended(id, i, 2, now, &FakeView);
            r.finished(id, i, now);
        }
    }
    by_prefix
}

fn mooncake(c: &mut Criterion) {
    let dir = std::env::var_os("CACHESIM_DATA").map_or_else(|| "../shared/data".into(), std::path::PathBuf::from);
    let path = dir.join("traces/mooncake/conversation_trace.jsonl");
    if !path.exists() {
        eprintln!("skipping the router benches: no {}", path.display());
        return;
    }
    let bytes = std::fs::read(&path).unwrap();
    let trace = cachesim::trace::parse(&path, &bytes, &Default::default()).unwrap();
    let w = cachesim::workload::build(trace, &BuildOptions::default()).unwrap();
    let mut g = c.benchmark_group("route_mooncake_12031req_16inst");
    g.throughput(Throughput::Elements(w.requests.len() as u64));
    g.sample_size(10);
    for kind in [
        RouterKind::RoundRobin,
        RouterKind::LeastLoad,
        RouterKind::CacheAware,
        RouterKind::PrefixHash,
        RouterKind::Aibrix,
        RouterKind::KvAware,
        RouterKind::LlmD,
        RouterKind::LlmDPredictedLatency,
    ] {
        let name = format!("{kind:?}");
        g.bench_function(name, |b| b.iter(|| route_all(&w, kind)));
    }
    g.finish();
}

criterion_group!(benches, mooncake);
criterion_main!(benches);
