//! Invariants of multi-instance and disaggregated runs over random small workloads (shared
//! prefixes, random arrivals, tight decode memory): every sent request completes or fails once;
//! in a disaggregated run each completed request was prefilled once on a prefill instance, its KV
//! moved once, after its prefill and before its first token, with bytes = the prompt tokens the
//! decode instance lacked × bytes per token; routers count their load back to zero; the same
//! inputs give identical results.

use cachesim::cache::{CacheSpec, Policy};
use cachesim::cluster::pd::{KvLink, PdConfig, PdStyle};
use cachesim::cluster::router::{build, RouterKind, RouterParams};
use cachesim::cost::Affine;
use cachesim::engine::{EngineConfig, EngineKind, EngineVersion};
use cachesim::sim::{drive, Fleet, Front, InstanceSpec, Keep, Pd, Role, SimResult};
use cachesim::trace::{self, ReadOptions};
use cachesim::workload::{build as build_workload, BuildOptions, Workload};
use proptest::prelude::*;
use std::path::Path;

const COST: Affine = Affine { base_s: 0.01, per_prefill_token_s: 0.001, per_decode_seq_s: 0.002, per_ctx_token_s: 0.0 };
const KVB: u64 = 100;

fn workload(reqs: &[(u32, u32, u32)]) -> Workload {
    let mut doc = String::new();
    for &(group, len, out) in reqs {
        // A group's requests share their first tokens.
        let ids: Vec<u32> =
            (0..len).map(|i| if i < 12 { group * 1000 + i } else { 500_000 + doc.len() as u32 + i }).collect();
        doc.push_str(&serde_json::json!({"prompt_ids": ids, "output_len": out}).to_string());
        doc.push('\n');
    }
    let file = trace::parse(Path::new("t.jsonl"), doc.as_bytes(), &ReadOptions::default()).unwrap();
    build_workload(file, &BuildOptions::default()).unwrap()
}

fn spec(role: Role, engine: EngineKind, blocks: u64) -> InstanceSpec<'static> {
    let policy = if engine == EngineKind::Sglang { Policy::Radix } else { Policy::Paged };
    InstanceSpec {
        role,
        engine: EngineConfig {
            max_num_seqs: 4,
            max_num_batched_tokens: 64,
            ..EngineConfig::new(EngineVersion::newest(engine))
        },
        cache: CacheSpec {
            policy,
            block_size: (policy == Policy::Paged).then_some(4),
            page_size: (policy == Policy::Radix).then_some(1),
            capacity_tokens: Some(blocks * 4),
            hybrid: None,
            sglang_pool: None,
        },
        cost: &COST,
    }
}

fn run(
    w: &Workload,
    sends: &[(u32, f64)],
    pd: Option<(u32, u32, PdStyle, u64)>,
    instances: usize,
    kind: RouterKind,
) -> SimResult {
    let front = Front {
        engine: EngineConfig::new(EngineVersion::newest(EngineKind::Vllm)),
        max_concurrency: None,
        request_overhead_s: 0.0,
        limits: None,
        itl: cachesim::metrics::ItlCount::Chunk,
    };
    match pd {
        None => {
            let specs = vec![spec(Role::Unified, EngineKind::Vllm, 64); instances];
            let mut r = build(kind, RouterParams::default(), instances);
            drive(w, sends, &front, &specs, r.as_mut(), None, Fleet::default(), Keep::default(), &|_, _| ())
        }
        Some((p, d, style, decode_blocks)) => {
            let engine = if style == PdStyle::Sglang { EngineKind::Sglang } else { EngineKind::Vllm };
            let mut specs = vec![spec(Role::Prefill, engine, 64); p as usize];
            specs.extend(std::iter::repeat_n(spec(Role::Decode, engine, decode_blocks), d as usize));
            let cfg = PdConfig {
                prefill: p,
                decode: d,
                style,
                link: KvLink { gbps: 1.0, latency_ms: 0.5, links: 2 },
                prefill_max_num_seqs: None,
                prefill_max_num_batched_tokens: None,
                decode_max_num_seqs: None,
                decode_max_num_batched_tokens: None,
            };
            let mut r = build(kind, RouterParams::default(), p as usize);
            let mut dr = build(RouterKind::LeastLoad, RouterParams::default(), d as usize);
            let pd = Pd { cfg, kv_bytes_per_token: KVB, decode_router: dr.as_mut() };
            drive(w, sends, &front, &specs, r.as_mut(), Some(pd), Fleet::default(), Keep::default(), &|_, _| ())
        }
    }
}

fn reqs() -> impl Strategy<Value = Vec<(u32, u32, u32, u32)>> {
    // (group, prompt length, output length, arrival in ms)
    proptest::collection::vec((0u32..3, 2u32..40, 1u32..6, 0u32..200), 1..24)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_request_once_and_kv_moved_once_in_order(
        rs in reqs(),
        p in 1u32..3,
        d in 1u32..3,
        sglang in any::<bool>(),
        decode_blocks in 4u64..40,
    ) {
        let w = workload(&rs.iter().map(|&(g, l, o, _)| (g, l, o)).collect::<Vec<_>>());
        let sends: Vec<(u32, f64)> = rs.iter().enumerate().map(|(i, r)| (i as u32, r.3 as f64 / 1e3)).collect();
        let style = if sglang { PdStyle::Sglang } else { PdStyle::Vllm };
        let r = run(&w, &sends, Some((p, d, style, decode_blocks)), 0, RouterKind::RoundRobin);
        prop_assert_eq!(r.records.len() as u64 + r.failed, sends.len() as u64);
        if decode_blocks >= 12 {
            // Every prompt (under 40 tokens) fits an idle decode instance (at least 48 slots).
            prop_assert_eq!(r.failed, 0);
        }
        let mut ids: Vec<u32> = r.records.iter().map(|x| x.id).collect();
        ids.sort_unstable();
        ids.dedup();
        prop_assert_eq!(ids.len(), r.records.len(), "each request completes once");
        prop_assert_eq!(r.instances[..p as usize].iter().map(|s| s.requests).sum::<u64>(), sends.len() as u64);
        for x in &r.records {
            let t = r.pd[x.id as usize];
            let q = &w.requests[x.id as usize];
            prop_assert!(t.prefill_instance < p && t.decode_instance < d);
            prop_assert!(t.arrived_s <= x.first_scheduled_s && x.first_scheduled_s <= t.prefill_done_s);
            prop_assert!(t.prefill_done_s <= t.transfer_start_s && t.transfer_start_s < t.transfer_end_s);
            prop_assert!(t.transfer_end_s < x.first_token_s, "no decode before the transfer ends: {:?} {:?}", t, x);
            prop_assert_eq!(t.bytes % KVB, 0);
            prop_assert!(t.bytes <= q.prompt_len as u64 * KVB);
            prop_assert_eq!(x.output_tokens, q.output_len);
        }
        // Transfers on two lanes never overlap more than two at a time.
        let mut ev: Vec<(f64, i32)> = r.records.iter().flat_map(|x| {
            let t = r.pd[x.id as usize];
            [(t.transfer_start_s, 1), (t.transfer_end_s, -1)]
        }).collect();
        ev.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut open = 0;
        for (_, e) in ev {
            open += e;
            prop_assert!(open <= 2);
        }
        let again = run(&w, &sends, Some((p, d, style, decode_blocks)), 0, RouterKind::RoundRobin);
        prop_assert_eq!(&again.records, &r.records);
    }

    #[test]
    fn data_parallel_runs_conserve_requests_and_load(
        rs in reqs(),
        n in 1usize..5,
        kind in prop_oneof![Just(RouterKind::RoundRobin), Just(RouterKind::Random), Just(RouterKind::LeastLoad)],
    ) {
        let w = workload(&rs.iter().map(|&(g, l, o, _)| (g, l, o)).collect::<Vec<_>>());
        let sends: Vec<(u32, f64)> = rs.iter().enumerate().map(|(i, r)| (i as u32, r.3 as f64 / 1e3)).collect();
        let r = run(&w, &sends, None, n, kind);
        prop_assert_eq!(r.records.len(), sends.len());
        prop_assert_eq!(r.instances.iter().map(|s| s.requests).sum::<u64>(), sends.len() as u64);
        for x in &r.records {
            prop_assert!((r.assigned[x.id as usize] as usize) < n);
        }
        let steps: u64 = r.instances.iter().map(|s| s.steps).sum();
        prop_assert_eq!(steps, r.steps);
        let again = run(&w, &sends, None, n, kind);
        prop_assert_eq!(&again.records, &r.records);
    }
}

fn cachesim(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_cachesim")).args(args).output().expect("cachesim runs")
}

#[test]
fn the_cli_reports_instances_router_and_pd_figures() {
    let out = cachesim(&["--instances", "3", "--router", "least-load", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["instances"].as_array().expect("an instances array");
    assert_eq!(rows.len(), 3);
    let routed: u64 = rows.iter().map(|r| r["requests"].as_u64().unwrap()).sum();
    assert_eq!(routed, v["requests_sent"].as_u64().unwrap());
    assert_eq!(v["router"]["policy"], "least-load");
    assert_eq!(v["config"]["cluster"]["instances"], 3);

    let out = cachesim(&["--prefill-instances", "1", "--decode-instances", "2", "--ttft-breakdown"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in ["1 prefill + 2 decode instances", " prefill ", " decode ", "TTFT breakdown", "transfer wait"] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }

    // A single instance prints neither table nor router entry.
    let out = cachesim(&["--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.get("instances").is_none() && v.get("router").is_none());

    let bad = cachesim(&["--instances", "2", "--prefill-instances", "1", "--decode-instances", "1"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--instances"));
}

#[test]
fn prefix_aware_routers_beat_round_robin_on_shared_prefix_groups() {
    let dir = tempfile::tempdir().unwrap();
    let gsp = dir.path().join("gsp.jsonl");
    let g = cachesim(&["gen", "gsp", "--num-groups", "64", "--prompts-per-group", "16", "-o", gsp.to_str().unwrap()]);
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let hit = |router: &str| {
        let out = cachesim(&["--trace", gsp.to_str().unwrap(), "--instances", "8", "--router", router, "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["hit_ratio"].as_f64().unwrap()
    };
    let (rr, ca, kv) = (hit("round-robin"), hit("cache-aware"), hit("kv-aware"));
    println!("hit ratio on gen gsp, 8 instances: round-robin {rr:.4}, cache-aware {ca:.4}, kv-aware {kv:.4}");
    assert!(ca > rr + 0.2 && kv > rr + 0.1, "{rr} {ca} {kv}");
    // Bad router knobs are refused with their flag.
    let bad = cachesim(&["--instances", "2", "--router", "cache-aware", "--cache-threshold", "1.5"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--cache-threshold"));
}

/// llm-d's predicted-latency profile keeps prefix affinity (its 0.80 filter) on shared-prefix
/// groups, echoes its flags, and learns over a timed run: on the bundled sample at ten times its
/// load, an SLO changes the picks.
#[test]
fn the_predicted_latency_picker_keeps_affinity_and_echoes_its_flags() {
    let dir = tempfile::tempdir().unwrap();
    let gsp = dir.path().join("gsp.jsonl");
    let g = cachesim(&["gen", "gsp", "--num-groups", "64", "--prompts-per-group", "16", "-o", gsp.to_str().unwrap()]);
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let json = |args: &[&str]| -> serde_json::Value {
        let out = cachesim(args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let base = ["--trace", gsp.to_str().unwrap(), "--instances", "8", "--json", "--router"];
    let rr = json(&[&base[..], &["round-robin"]].concat());
    let pl = json(&[&base[..], &["llm-d-predicted-latency", "--slo-ttft-ms", "1000"]].concat());
    let (rr, hit) = (rr["hit_ratio"].as_f64().unwrap(), pl["hit_ratio"].as_f64().unwrap());
    assert!(hit > rr + 0.2, "{rr} {hit}");
    assert_eq!(pl["config"]["cluster"]["router_params"]["predicted_latency"]["slo_ttft_ms"], 1000.0);
    assert!(pl["router"]["prefix_share"].as_f64().unwrap() > 0.9, "{}", pl["router"]);
    let sample = ["--time-scale", "0.1", "--instances", "4", "--json", "--router", "llm-d-predicted-latency"];
    let plain = json(&sample);
    let slo =
        json(&[&sample[..], &["--latency-streaming-mode", "--slo-ttft-ms", "50", "--slo-tpot-ms", "20"]].concat());
    assert_eq!(plain["completed"], slo["completed"]);
    assert_ne!(plain["mean_ttft_ms"], slo["mean_ttft_ms"], "the SLO headers change the picks");
    // Per priority class: a map in the echo.
    let classes = ["--priority-mix", "0:0.5,1:0.5", "--slo-ttft-ms", "0:50,1:5000"];
    let per = json(&[&sample[..], &classes[..]].concat());
    assert_eq!(per["completed"], plain["completed"]);
    let echo = &per["config"]["cluster"]["router_params"]["predicted_latency"]["slo_ttft_ms"];
    assert_eq!((echo["0"].as_f64(), echo["1"].as_f64()), (Some(50.0), Some(5000.0)));
    // The admitter sheds requests of a negative priority nobody can serve in 1 ms, once the
    // endpoints are busy and warm (a small pool), and every request is counted.
    let shed = json(&[
        "--time-scale",
        "0.02",
        "--instances",
        "4",
        "--json",
        "--router",
        "llm-d-predicted-latency",
        "--num-gpu-blocks-override",
        "600",
        "--priority-mix=-1:0.5,0:0.5",
        "--slo-ttft-ms=-1:1",
    ]);
    let rejected = shed["failed_reasons"]["slo_rejected"].as_u64().unwrap_or(0);
    assert!(rejected > 0, "{}", shed["failed_reasons"]);
    assert_eq!(
        shed["completed"].as_u64().unwrap() + shed["failed"].as_u64().unwrap(),
        shed["requests_sent"].as_u64().unwrap()
    );
}
