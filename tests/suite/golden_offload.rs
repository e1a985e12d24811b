//! Differential test against vLLM's own CPU KV offloading: every schedule in
//! `tests/golden/vllm_offload/schedules` was written by vLLM 0.33.0's `Scheduler` with its own
//! `OffloadingConnector` (scheduler and worker halves; only the copies and the model are the
//! driver's: a copy ends within the step it is reported in, see that folder's README). Each is
//! replayed through the library with the settings of its config line and a host link so fast
//! that a copy takes no time, and every step that scheduled tokens must be composed identically
//! — the scheduled requests with their new tokens and computed tokens (in order), preemptions,
//! samples and finishes — and so must each request's GPU and host hits at every admission, the
//! chunks stored and evicted, and the loads. The `_lag1` schedules report every copy one step
//! later. A load submitted after a step's forward and taking a little time (1 µs here) is seen
//! one step later, so cachesim reproduces the lag-1 cases whose stores do not matter (`reload`,
//! `aligned`, `dedup`); a store taking one more step whatever its size is not a bandwidth, and
//! the two `pressure*_lag1` schedules, where it matters, are kept for reference, not compared.
//! The folder is part of the repository: the test never skips.

use crate::common::{json_num, request_ids, sorted};
use cachesim::cache::{CacheSpec, Policy};
use cachesim::cost::Affine;
use cachesim::engine::vllm_offload::{OffloadBackend, OffloadConfig};
use cachesim::engine::{EngineConfig, EngineVersion};
use cachesim::sim::{self, Keep, ScheduledStep, SimConfig};
use cachesim::trace::ReadOptions;
use cachesim::workload::BuildOptions;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/vllm_offload")
}

/// One step that scheduled tokens: (request, new tokens, computed before) in order, and the
/// requests preempted, sampled and finished.
type Step = (Vec<(u32, u32, u32)>, Vec<u32>, Vec<u32>, Vec<u32>);

struct Golden {
    config: Value,
    steps: Vec<Step>,
    /// Per request: (GPU hit, host hit) at every admission that ran, in order.
    hits: BTreeMap<u32, Vec<(u32, u32)>>,
    stored_chunks: u64,
    evicted_chunks: u64,
    loads: u64,
}

fn read(path: &Path) -> Golden {
    let text = std::fs::read_to_string(path).unwrap();
    let mut g = Golden {
        config: Value::Null,
        steps: Vec::new(),
        hits: BTreeMap::new(),
        stored_chunks: 0,
        evicted_chunks: 0,
        loads: 0,
    };
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let o: Value = serde_json::from_str(line).unwrap();
        match o["type"].as_str().unwrap() {
            "config" => g.config = o,
            "step" => {
                for job in o["store_jobs"].as_array().unwrap() {
                    g.stored_chunks += json_num(job, "chunks");
                }
                for offer in o["store_offers"].as_array().unwrap() {
                    g.evicted_chunks += offer["evicted"].as_array().map_or(0, |e| e.len() as u64);
                }
                g.loads += o["load_jobs"].as_array().unwrap().len() as u64;
                if o["empty"].as_bool().unwrap() {
                    continue;
                }
                let scheduled = o["scheduled"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| {
                        let id: u32 = s["id"].as_str().unwrap().parse().unwrap();
                        (id, json_num(s, "tokens") as u32, json_num(s, "computed_before") as u32)
                    })
                    .collect();
                g.steps.push((
                    scheduled,
                    request_ids(&o["preempted"]),
                    request_ids(&o["sampled"]),
                    request_ids(&o["finished"]),
                ));
            }
            "request" => {
                let id: u32 = o["id"].as_str().unwrap().parse().unwrap();
                let each =
                    |k: &str| o[k].as_array().unwrap().iter().map(|h| h.as_u64().unwrap() as u32).collect::<Vec<_>>();
                g.hits.insert(
                    id,
                    each("gpu_hit_each_admission").into_iter().zip(each("host_hit_each_admission")).collect(),
                );
            }
            _ => {}
        }
    }
    assert!(g.config.is_object(), "{}: no config line", path.display());
    g
}

/// Replays one schedule; returns the first divergences (empty when identical).
fn replay(path: &Path) -> String {
    let g = read(path);
    let c = &g.config;
    assert_eq!(c["vllm_version"].as_str(), Some("0.33.0"));
    assert_eq!(c["async_scheduling"].as_bool(), Some(false));
    assert_eq!(c["policy"].as_str(), Some("fcfs"));
    assert_eq!(c["blocks_per_chunk"].as_u64(), Some(1));
    assert_eq!(c["offload_prompt_only"].as_bool(), Some(true));
    let lag = json_num(c, "load_lag_steps");
    assert_eq!(lag, json_num(c, "store_lag_steps"));
    let block = json_num(c, "block_size");
    let trace = dir().join(c["trace"].as_str().unwrap());
    let w = cachesim::load_workload(Some(&trace), &ReadOptions::default(), &BuildOptions::default()).unwrap();
    let cfg = SimConfig {
        engine: EngineConfig {
            max_num_seqs: json_num(c, "max_num_seqs") as u32,
            max_num_batched_tokens: json_num(c, "max_num_batched_tokens") as u32,
            offload: Some(OffloadConfig {
                backend: OffloadBackend::Native,
                size_gib: c["kv_offloading_size_gib"].as_f64().unwrap(),
                chunks: json_num(c, "cpu_num_chunks"),
                chunk_tokens: block as u32,
                block_tokens: block as u32,
                chunk_bytes_per_rank: json_num(c, "gpu_bytes_per_block"),
                // Lag 0: a copy takes no time. Lag 1: a little (1 µs), less than any step.
                link_bytes_per_s: if lag == 0 {
                    f64::INFINITY
                } else {
                    json_num(c, "gpu_bytes_per_block") as f64 * 1e6
                },
                disk: None,
                remote: None,
            }),
            ..EngineConfig::new(EngineVersion::Vllm033)
        },
        cache: CacheSpec {
            policy: Policy::Paged,
            block_size: Some(block as u32),
            page_size: None,
            capacity_tokens: Some((json_num(c, "num_gpu_blocks") - 1) * block),
            hybrid: None,
            sglang_pool: None,
        },
        max_concurrency: None,
        request_overhead_s: 0.0,
        limits: None,
    };
    // Requests arriving at step k > 0 reach an idle engine: sent at k seconds, long after the
    // steps before (10 ms and some).
    let cost = Affine { base_s: 0.01, per_prefill_token_s: 1e-5, per_decode_seq_s: 1e-4, per_ctx_token_s: 0.0 };
    let sends: Vec<(u32, f64)> = c["arrival_steps"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, s)| (i as u32, s.as_f64().unwrap()))
        .collect();
    let r = sim::run(&w, &sends, &cfg, &cost, Keep { schedule: true, ..Keep::default() });
    assert_eq!(r.failed, 0);
    let ours: Vec<Step> = r
        .schedule
        .iter()
        .map(|s: &ScheduledStep| (s.items.clone(), sorted(&s.preempted), sorted(&s.sampled), sorted(&s.finished)))
        .collect();
    let name = path.file_name().unwrap().to_string_lossy();
    let mut out = String::new();
    if g.steps.len() != ours.len() {
        writeln!(out, "{name}: vLLM ran {} steps with tokens, cachesim {}", g.steps.len(), ours.len()).unwrap();
    }
    if let Some(k) = (0..g.steps.len().min(ours.len())).find(|&k| g.steps[k] != ours[k]) {
        writeln!(out, "{name}: first divergence at the {k}th step with tokens").unwrap();
        writeln!(out, "    vLLM     {:?}\n    cachesim {:?}", g.steps[k], ours[k]).unwrap();
    }
    let h = r.offload.expect("the tier's figures");
    let host: u64 = g.hits.values().flatten().map(|&(_, host)| host as u64).sum();
    let got = (h.host_hit_tokens, h.loads, h.tier.stored_chunks, h.tier.evicted_chunks);
    let want = (host, g.loads, g.stored_chunks, g.evicted_chunks);
    if got != want {
        writeln!(
            out,
            "{name}: (host hit tokens, loads, chunks stored, chunks evicted): vLLM {want:?}, cachesim {got:?}"
        )
        .unwrap();
    }
    out
}

#[test]
fn every_offloading_schedule_is_reproduced_step_for_step() {
    let mut files = crate::common::files(&dir().join("schedules"), &[".jsonl"]);
    assert_eq!(files.len(), 10, "five cases at two copy lags");
    // Every store one step late, whatever its size: not a bandwidth (see above).
    files.retain(|f| {
        let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
        !(stem.starts_with("pressure") && stem.ends_with("_lag1"))
    });
    assert_eq!(files.len(), 8);
    let mut report = String::new();
    for f in &files {
        let diff = replay(f);
        eprintln!(
            "{}: {}",
            f.file_stem().unwrap().to_string_lossy(),
            if diff.is_empty() { "identical" } else { "DIFFERS" }
        );
        report.push_str(&diff);
    }
    assert!(report.is_empty(), "offloading schedules not reproduced:\n{report}");
}
