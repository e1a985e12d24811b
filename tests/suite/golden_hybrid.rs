//! Differential test against vLLM 0.33.0's hybrid KV cache manager: every schedule in
//! `tests/golden/vllm_hybrid/schedules` and `tests/golden/vllm_mamba/schedules` was written by
//! vLLM 0.33.0's own `Scheduler` over a `KVCacheConfig` with full-attention and sliding-window
//! or Mamba (linear-attention) groups as vLLM's planner builds them, or with one sliding-window
//! group alone (its `HybridKVCacheCoordinator` or `UnitaryKVCacheCoordinator`,
//! `SlidingWindowManager`, `MambaManager`, `BlockPool`; only the
//! model's sampling is the driver's, see those folders' READMEs). Each is replayed through the
//! library with the settings of its config line (the window, the groups and their order, the
//! pool, the retention interval, the admission cap, the Mamba prefill checkpoints), and every
//! step must be composed identically — the scheduled requests with their new and computed tokens
//! (in order, so every prefix hit and every Mamba split), preemptions, samples, finishes, the
//! blocks in use after scheduling and the queue lengths. The folders are part of the repository:
//! the test never skips.

use crate::common::{json_num, request_ids, sorted};
use cachesim::cache::hybrid::{HybridLayout, MambaRules};
use cachesim::cache::{CacheSpec, Policy};
use cachesim::cost::Affine;
use cachesim::engine::{EngineConfig, EngineVersion};
use cachesim::sim::{self, Keep, SimConfig};
use cachesim::trace::ReadOptions;
use cachesim::workload::BuildOptions;
use serde_json::Value;
use std::fmt::Write;
use std::path::{Path, PathBuf};

fn dir(folder: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(folder)
}

/// One step as both sides describe it: (request, new tokens, computed before) in order,
/// preempted, sampled, finished, blocks in use, waiting, running.
type Step = (Vec<(u32, u32, u32)>, Vec<u32>, Vec<u32>, Vec<u32>, u64, u32, u32);

/// Replays one schedule; returns the first divergence (empty when identical).
fn replay(dir: &Path, path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str::<Value>(l).unwrap());
    let c = lines.next().unwrap();
    assert_eq!(c["type"], "config");
    assert_eq!(c["vllm_version"].as_str(), Some("0.33.0"));
    assert_eq!(c["async_scheduling"].as_bool(), Some(false));
    assert_eq!(c["policy"].as_str(), Some("fcfs"));
    assert_eq!(c["scheduler_reserve_full_isl"].as_bool(), Some(true));
    assert_eq!(c["long_prefill_token_threshold"].as_u64(), Some(0));
    assert_eq!(c["enable_partial_hash_hits"].as_bool(), Some(false));
    let block = json_num(&c, "block_size");
    let groups = c["groups"].as_array().unwrap();
    let of = |kind: &str| groups.iter().filter(|g| g["kind"] == kind).collect::<Vec<&Value>>();
    let (sliding, mamba) = (of("sliding_window"), of("mamba"));
    let retention = c["prefix_cache_retention_interval"].as_u64().map(|n| n as u32);
    let layout = match mamba.first() {
        None => HybridLayout {
            full_groups: (groups.len() - sliding.len()) as u8,
            sliding_groups: sliding.len() as u8,
            sliding_first: groups[0]["kind"] == "sliding_window",
            window: json_num(&c, "sliding_window") as u32,
            retention,
            admission_cap_blocks: json_num(sliding[0], "max_admission_blocks_per_request") as u32,
            mamba_groups: 0,
            mamba: None,
        },
        Some(m) => {
            let prefix_caching = c["enable_prefix_caching"].as_bool().unwrap();
            assert_eq!(c["mamba_cache_mode"].as_str(), Some(if prefix_caching { "align" } else { "none" }));
            HybridLayout {
                full_groups: (groups.len() - mamba.len()) as u8,
                sliding_groups: 0,
                sliding_first: false,
                window: 0,
                retention,
                admission_cap_blocks: 0,
                mamba_groups: mamba.len() as u8,
                mamba: Some(MambaRules {
                    first: groups[0]["kind"] == "mamba",
                    checkpoint_alignment: m["prefill_checkpoint_alignment"]
                        .as_u64()
                        .filter(|_| json_num(m, "num_prefill_checkpoint_blocks") > 0)
                        .map(|a| a as u32),
                    max_prefill_tokens: json_num(&c, "max_num_scheduled_tokens") as u32,
                    prefix_caching,
                }),
            }
        }
    };
    let trace = dir.join("traces").join(c["trace"].as_str().unwrap());
    let w = cachesim::load_workload(Some(&trace), &ReadOptions::default(), &BuildOptions::default()).unwrap();
    assert_eq!(w.requests.len() as u64, json_num(&c, "num_requests"));
    let cfg = SimConfig {
        engine: EngineConfig {
            max_num_seqs: json_num(&c, "max_num_seqs") as u32,
            max_num_batched_tokens: json_num(&c, "max_num_batched_tokens") as u32,
            ..EngineConfig::new(EngineVersion::Vllm033)
        },
        cache: CacheSpec {
            policy: if layout.mamba.is_some_and(|m| !m.prefix_caching) { Policy::None } else { Policy::Paged },
            block_size: Some(block as u32),
            page_size: None,
            capacity_tokens: Some((json_num(&c, "num_gpu_blocks") - 1) * block),
            hybrid: Some(layout),
            sglang_pool: None,
        },
        max_concurrency: None,
        request_overhead_s: 0.0,
        limits: None,
    };
    // Every step takes exactly 1 s and a request arriving at step k is sent at k + 0.5 s: queued
    // when step k is formed (at k + 0.5 s after steps from the first at 0.5 s, or at once when
    // the engine is idle, as the driver jumps to the next arrival).
    let cost = Affine { base_s: 1.0, per_prefill_token_s: 0.0, per_decode_seq_s: 0.0, per_ctx_token_s: 0.0 };
    let arrivals: Vec<f64> = serde_json::from_str(
        &std::fs::read_to_string(dir.join("traces").join(c["arrival_steps"].as_str().unwrap())).unwrap(),
    )
    .unwrap();
    let sends: Vec<(u32, f64)> = arrivals.iter().enumerate().map(|(i, &s)| (i as u32, s + 0.5)).collect();
    let r = sim::run(&w, &sends, &cfg, &cost, Keep { schedule: true, ..Keep::default() });
    assert_eq!(r.failed, 0);
    let ours: Vec<Step> = r
        .schedule
        .iter()
        .map(|s| {
            let u = s.usage_after_schedule;
            let used = (u.used_tokens - u.evictable_tokens) / block;
            (s.items.clone(), sorted(&s.preempted), sorted(&s.sampled), sorted(&s.finished), used, s.waiting, s.running)
        })
        .collect();
    let theirs: Vec<Step> = lines
        .filter(|o| o["type"] == "step")
        .map(|o| {
            let items = o["scheduled"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    let id: u32 = s["id"].as_str().unwrap().parse().unwrap();
                    (id, json_num(s, "tokens") as u32, json_num(s, "computed_before") as u32)
                })
                .collect();
            (
                items,
                request_ids(&o["preempted"]),
                request_ids(&o["sampled"]),
                request_ids(&o["finished"]),
                json_num(&o, "used_blocks_after_schedule"),
                json_num(&o, "waiting_after_schedule") as u32,
                json_num(&o, "running_after_schedule") as u32,
            )
        })
        .collect();
    let name = path.file_name().unwrap().to_string_lossy();
    let mut out = String::new();
    if theirs.len() != ours.len() {
        writeln!(out, "{name}: vLLM ran {} steps with tokens, cachesim {}", theirs.len(), ours.len()).unwrap();
    }
    if let Some(k) = (0..theirs.len().min(ours.len())).find(|&k| theirs[k] != ours[k]) {
        writeln!(out, "{name}: first divergence at the {k}th step with tokens").unwrap();
        writeln!(out, "    vLLM     {:?}\n    cachesim {:?}", theirs[k], ours[k]).unwrap();
    }
    out
}

#[test]
fn every_hybrid_schedule_is_reproduced_step_for_step() {
    let dir = dir("vllm_hybrid");
    let files = crate::common::files(&dir.join("schedules"), &[".jsonl"]);
    assert!(files.len() >= 15, "the golden schedules are in the repository");
    let report: String = files.iter().map(|f| replay(&dir, f)).collect();
    assert!(report.is_empty(), "{report}");
}

#[test]
fn every_mamba_schedule_is_reproduced_step_for_step() {
    let dir = dir("vllm_mamba");
    let files = crate::common::files(&dir.join("schedules"), &[".jsonl"]);
    assert!(files.len() >= 12, "the golden schedules are in the repository");
    let report: String = files.iter().map(|f| replay(&dir, f)).collect();
    assert!(report.is_empty(), "{report}");
}

/// The catalog's all-sliding model end to end on the bundled sample: vLLM 0.33 runs one
/// sliding-window group of all its layers (the shape of the `pure_*` schedules above) with the
/// hybrid manager on or off, and a hit needs the window's blocks, so fewer prompt tokens hit than
/// under full attention; SGLang serves it with one full pool and says so. The figures are those
/// docs/engines/hybrid-attention.md quotes.
#[test]
fn an_all_sliding_model_runs_one_sliding_group_on_vllm_and_one_pool_on_sglang() {
    use crate::common::{cachesim, ok};
    let vllm = ok(&["--model", "mistral-7b-v0.1"]);
    for want in [
        "KV cache:       paged (one sliding-window group of 4096 tokens (every layer slides); sliding blocks kept at \
         replay and shared-prefix points) · 472,672 tokens",
        "83,664 of 104,447 prompt tokens reused (80.10%) · 0 evicted · peak 19,472 tokens",
    ] {
        assert!(vllm.contains(want), "{want}\n{vllm}");
    }
    assert!(ok(&["--model", "llama-3.1-8b"]).contains("95,216 of 104,447 prompt tokens reused (91.16%)"));
    assert_eq!(ok(&["--model", "mistral-7b-v0.1", "--disable-hybrid-kv-cache-manager"]), vllm);
    let sglang = cachesim(&["--model", "mistral-7b-v0.1", "--engine", "sglang"]);
    let (out, err) = (String::from_utf8_lossy(&sglang.stdout), String::from_utf8_lossy(&sglang.stderr));
    assert!(sglang.status.success() && out.contains("KV cache:       radix (page 1) ·"), "{out}");
    assert!(!out.contains("window pool") && err.contains("a model with no full-attention layer"), "{err}");
}
