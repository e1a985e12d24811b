//! Differential test against vLLM's own scheduler: every golden schedule in
//! `../shared/golden/vllm/schedules` (written by vLLM 0.33.0's `Scheduler`, see that folder's
//! README) is replayed through the library with the settings of its config line, and each step
//! must be composed identically — the scheduled requests with their new tokens and computed
//! tokens (in order), preemptions, samples and finishes, the KV blocks in use after scheduling,
//! the queue lengths — and so must each request's first-scheduled, first-token and finish steps,
//! its prefix hits at every admission and its preemptions. `default` schedules are vLLM 0.33 as
//! shipped (bundle `vllm@0.33`); `legacy` ones switch two 2026 changes back (the older bundle).
//!
//! Skipped (with a printed reason) when the golden folder is absent, unless
//! CACHESIM_REQUIRE_DATA=1.

use crate::common::{self, json_num, request_ids, sorted};

use cachesim::cache::{CacheSpec, Policy};
use cachesim::cost::Affine;
use cachesim::engine::{EngineConfig, EngineVersion, SchedulingPolicy};
use cachesim::sim::{self, Keep, ScheduledStep, SimConfig};
use cachesim::trace::ReadOptions;
use cachesim::workload::BuildOptions;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// One step as both sides describe it.
#[derive(Debug, PartialEq)]
struct Step {
    /// (request, new tokens, computed before), in scheduling order.
    scheduled: Vec<(u32, u32, u32)>,
    preempted: Vec<u32>,
    sampled: Vec<u32>,
    finished: Vec<u32>,
    used_blocks: u64,
    waiting: u32,
    running: u32,
}

/// One request's milestones, in step numbers.
#[derive(Debug, PartialEq, Default)]
struct Req {
    first_scheduled_step: Option<u64>,
    first_token_step: Option<u64>,
    finish_step: Option<u64>,
    hit_tokens_each_admission: Vec<u32>,
    preemptions: u32,
}

struct Golden {
    config: Value,
    steps: Vec<Step>,
    reqs: BTreeMap<u32, Req>,
    /// Admission kind per (step, request): new or resumed.
    kinds: BTreeMap<(usize, u32), String>,
}

fn read_golden(path: &Path) -> Golden {
    let text = std::fs::read_to_string(path).unwrap();
    let (mut config, mut steps, mut reqs, mut kinds) = (Value::Null, Vec::new(), BTreeMap::new(), BTreeMap::new());
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let o: Value = serde_json::from_str(line).unwrap();
        match o["type"].as_str().unwrap() {
            "config" => config = o,
            "step" => {
                assert_eq!(json_num(&o, "step") as usize, steps.len(), "{}: steps numbered in order", path.display());
                let mut scheduled = Vec::new();
                for s in o["scheduled"].as_array().unwrap() {
                    let id: u32 = s["id"].as_str().unwrap().parse().unwrap();
                    scheduled.push((id, json_num(s, "tokens") as u32, json_num(s, "computed_before") as u32));
                    let kind = s["kind"].as_str().unwrap();
                    if kind != "running" {
                        kinds.insert((steps.len(), id), kind.to_string());
                    }
                }
                steps.push(Step {
                    scheduled,
                    preempted: request_ids(&o["preempted"]),
                    sampled: request_ids(&o["sampled"]),
                    finished: request_ids(&o["finished"]),
                    used_blocks: json_num(&o, "used_blocks_after_schedule"),
                    waiting: json_num(&o, "waiting_after_schedule") as u32,
                    running: json_num(&o, "running_after_schedule") as u32,
                });
            }
            "request" => {
                let id: u32 = o["id"].as_str().unwrap().parse().unwrap();
                let hits = o["hit_tokens_each_admission"].as_array().unwrap();
                reqs.insert(
                    id,
                    Req {
                        first_scheduled_step: o["first_scheduled_step"].as_u64(),
                        first_token_step: o["first_token_step"].as_u64(),
                        finish_step: o["finish_step"].as_u64(),
                        hit_tokens_each_admission: hits.iter().map(|h| h.as_u64().unwrap() as u32).collect(),
                        preemptions: json_num(&o, "preemptions") as u32,
                    },
                );
            }
            _ => {}
        }
    }
    assert!(config.is_object(), "{}: no config line", path.display());
    Golden { config, steps, reqs, kinds }
}

/// cachesim's side: steps, request milestones (derived from the steps, as the golden driver
/// derives vLLM's), and the admission kind per (step, request).
fn cachesim_side(schedule: &[ScheduledStep], block: u64) -> Golden {
    let (mut steps, mut reqs, mut kinds) = (Vec::new(), BTreeMap::<u32, Req>::new(), BTreeMap::new());
    let mut running = BTreeSet::new();
    let mut preempted_ever = BTreeSet::new();
    for (k, s) in schedule.iter().enumerate() {
        for &p in &s.preempted {
            running.remove(&p);
            preempted_ever.insert(p);
            reqs.entry(p).or_default().preemptions += 1;
        }
        for &(id, _, before) in &s.items {
            let r = reqs.entry(id).or_default();
            r.first_scheduled_step.get_or_insert(k as u64);
            if running.insert(id) {
                r.hit_tokens_each_admission.push(before);
                let kind = if preempted_ever.contains(&id) { "resumed" } else { "new" };
                kinds.insert((k, id), kind.to_string());
            }
        }
        for &id in &s.sampled {
            reqs.entry(id).or_default().first_token_step.get_or_insert(k as u64);
        }
        for &id in &s.finished {
            reqs.entry(id).or_default().finish_step = Some(k as u64);
            running.remove(&id);
        }
        let u = s.usage_after_schedule;
        let (preempted, sampled, finished) = (sorted(&s.preempted), sorted(&s.sampled), sorted(&s.finished));
        steps.push(Step {
            scheduled: s.items.clone(),
            preempted,
            sampled,
            finished,
            used_blocks: (u.used_tokens - u.evictable_tokens) / block,
            waiting: s.waiting,
            running: s.running,
        });
    }
    Golden { config: Value::Null, steps, reqs, kinds }
}

/// The bundle a golden mode is reproduced by.
fn bundle(mode: &str) -> EngineVersion {
    match mode {
        "default" => EngineVersion::Vllm033,
        "legacy" => EngineVersion::Vllm018,
        other => panic!("unknown golden mode {other}"),
    }
}

/// Replays one schedule; returns a description of the first divergences (empty when identical).
fn replay(dir: &Path, path: &Path) -> String {
    let g = read_golden(path);
    let c = &g.config;
    let mode = c["free_order"].as_str().unwrap();
    assert_eq!(c["scheduler_reserve_full_isl"].as_bool().unwrap(), mode == "default", "mode and switches agree");
    assert_eq!(c["async_scheduling"].as_bool(), Some(false));
    let policy = match c["policy"].as_str() {
        Some("fcfs") => SchedulingPolicy::Fcfs,
        Some("priority") => SchedulingPolicy::Priority,
        other => panic!("{}: unknown policy {other:?}", path.display()),
    };
    assert_eq!(c["long_prefill_token_threshold"].as_u64(), Some(0));
    assert_eq!(c["watermark"].as_f64(), Some(0.0));
    let block = json_num(c, "block_size");
    let version = bundle(mode);
    let trace = dir.join(c["trace"].as_str().unwrap());
    // LoRA schedules name their adapters in order (ids 1, 2, …) and the slots.
    let modules: Vec<String> = c["lora_modules"]
        .as_array()
        .map_or(Vec::new(), |m| m.iter().map(|x| x.as_str().unwrap().to_string()).collect());
    let lora_draw = (!modules.is_empty()).then(|| cachesim::workload::lora::LoraDraw {
        modules: modules.clone(),
        assignment: Default::default(),
        seed: 0,
    });
    let build = BuildOptions { lora: lora_draw, ..BuildOptions::default() };
    let w = cachesim::load_workload(Some(&trace), &ReadOptions::default(), &build).unwrap();
    assert_eq!(w.requests.len() as u64, json_num(c, "num_requests"));
    let lora = c["max_loras"].as_u64().map(|max| {
        let model = cachesim::catalog::model("llama-3.1-8b", None).unwrap();
        cachesim::engine::vllm_lora::LoraConfig {
            adapters: modules.len() as u16,
            max_loras: max as u32,
            max_cpu_loras: max as u32,
            max_lora_rank: 16,
            // Loads take no time: every step lasts what the replay prices it at.
            read_s: 0.0,
            copy_s: 0.0,
            slot_bytes_per_rank: 0,
            kernels: cachesim::cost::lora::LoraKernels {
                shape: cachesim::cost::lora::LoraShape::of(&model, 1).unwrap(),
                max_lora_rank: 16,
            },
        }
    });
    let cfg = SimConfig {
        engine: EngineConfig {
            max_num_seqs: json_num(c, "max_num_seqs") as u32,
            max_num_batched_tokens: json_num(c, "max_num_batched_tokens") as u32,
            enable_chunked_prefill: c["enable_chunked_prefill"].as_bool().unwrap(),
            scheduling_policy: policy,
            lora,
            ..EngineConfig::new(version)
        },
        cache: CacheSpec {
            policy: Policy::Paged,
            block_size: Some(block as u32),
            page_size: None,
            // `num_gpu_blocks` counts the null block, as `--num-gpu-blocks-override` does.
            capacity_tokens: Some((json_num(c, "num_gpu_blocks") - 1) * block),
            hybrid: None,
            sglang_pool: None,
        },
        max_concurrency: None,
        request_overhead_s: 0.0,
        limits: None,
    };
    // A trace with times (the priority schedules): every step takes exactly 1 s, so a request
    // sent at (k − 0.5) s is queued when step k is scheduled, as the driver adds it before step
    // k. Without times every request arrives before step 0 and the step times do not matter.
    let timed = w.requests.iter().any(|r| r.arrival_ms.is_some());
    let cost = if timed {
        Affine { base_s: 1.0, per_prefill_token_s: 0.0, per_decode_seq_s: 0.0, per_ctx_token_s: 0.0 }
    } else {
        Affine { base_s: 0.01, per_prefill_token_s: 1e-5, per_decode_seq_s: 1e-4, per_ctx_token_s: 0.0 }
    };
    let sends: Vec<(u32, f64)> =
        w.requests.iter().enumerate().map(|(i, r)| (i as u32, r.arrival_ms.unwrap_or(0.0) / 1e3)).collect();
    let r = sim::run(&w, &sends, &cfg, &cost, Keep { schedule: true, ..Keep::default() });
    assert_eq!(r.failed, 0);
    let ours = cachesim_side(&r.schedule, block);

    let mut out = String::new();
    let name = path.file_name().unwrap().to_string_lossy();
    // Coalesced decode steps change nothing: the same run stepped one step at a time.
    let mut stepped = sim::run(&w, &sends, &cfg, &cost, Keep { schedule: true, every_step: true, ..Keep::default() });
    assert_eq!(stepped.coalesced_steps, 0);
    stepped.coalesced_steps = r.coalesced_steps;
    let mut r = r;
    r.log.settle();
    stepped.log.settle();
    if format!("{r:?}") != format!("{stepped:?}") {
        writeln!(out, "{name} ({version}): the run differs with every step stepped (--no-step-coalescing)").unwrap();
    }
    if g.steps.len() != ours.steps.len() {
        writeln!(out, "{name} ({version}): vLLM ran {} steps, cachesim {}", g.steps.len(), ours.steps.len()).unwrap();
    }
    if let Some(k) = (0..g.steps.len().min(ours.steps.len())).find(|&k| g.steps[k] != ours.steps[k]) {
        let (a, b) = (&g.steps[k], &ours.steps[k]);
        writeln!(out, "{name} ({version}): first divergence at step {k}").unwrap();
        let mut field = |what: &str, x: String, y: String| {
            if x != y {
                writeln!(out, "  {what}:\n    vLLM     {x}\n    cachesim {y}").unwrap();
            }
        };
        field("scheduled (id, tokens, computed before)", format!("{:?}", a.scheduled), format!("{:?}", b.scheduled));
        field("preempted", format!("{:?}", a.preempted), format!("{:?}", b.preempted));
        field("sampled", format!("{:?}", a.sampled), format!("{:?}", b.sampled));
        field("finished", format!("{:?}", a.finished), format!("{:?}", b.finished));
        field("blocks in use after scheduling", a.used_blocks.to_string(), b.used_blocks.to_string());
        field("waiting after scheduling", a.waiting.to_string(), b.waiting.to_string());
        field("running after scheduling", a.running.to_string(), b.running.to_string());
        if k > 0 {
            writeln!(out, "  (step {} agreed: {:?})", k - 1, g.steps[k - 1].scheduled).unwrap();
        }
    }
    if g.kinds != ours.kinds {
        let first = g.kinds.iter().zip(ours.kinds.iter()).find(|(x, y)| x != y);
        writeln!(out, "{name}: admissions differ, first (vLLM, cachesim): {first:?}").unwrap();
    }
    for (id, want) in &g.reqs {
        match ours.reqs.get(id) {
            Some(got) if got == want => {}
            got => {
                writeln!(out, "{name}: request {id}:\n    vLLM     {want:?}\n    cachesim {got:?}").unwrap();
                break;
            }
        }
    }
    out
}

/// Replays every schedule in `files` (of the folder `dir`), printing each one's verdict;
/// returns the divergences of all (empty when every one is identical).
fn replay_all(dir: &Path, files: &[PathBuf]) -> String {
    let mut report = String::new();
    for f in files {
        let diff = replay(dir, f);
        eprintln!(
            "{}: {}",
            f.file_stem().unwrap().to_string_lossy(),
            if diff.is_empty() { "identical" } else { "DIFFERS" }
        );
        report.push_str(&diff);
    }
    report
}

/// The schedule files, in name order.
fn schedule_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("schedules"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    files
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn every_golden_schedule_is_reproduced_step_for_step() {
    let Some(dir) = common::golden_dir("vllm") else { return };
    let files = schedule_files(&dir);
    assert!(files.len() >= 9, "expected the nine golden schedules, found {}", files.len());
    let modes: BTreeSet<String> = files
        .iter()
        .map(|f| f.file_stem().unwrap().to_string_lossy().rsplit('_').next().unwrap().to_string())
        .collect();
    let report = replay_all(&dir, &files);
    assert_eq!(modes, BTreeSet::from(["default".to_string(), "legacy".to_string()]));
    assert!(report.is_empty(), "golden schedules not reproduced:\n{report}");
}

/// The command the golden README gives runs every schedule's settings through the binary: vLLM
/// starts with any `--num-gpu-blocks-override` (it checks memory before applying it), so these
/// small pools are simulated, not refused, and every request completes.
#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn the_readme_command_runs_every_schedule() {
    let Some(dir) = common::golden_dir("vllm") else { return };
    for path in schedule_files(&dir) {
        let config = read_golden(&path).config;
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let trace = dir.join(config["trace"].as_str().unwrap());
        let n = |k: &str| json_num(&config, k).to_string();
        let mut args = vec![
            "run".to_string(),
            "--trace".into(),
            trace.display().to_string(),
            "--request-rate".into(),
            "inf".into(),
            "--block-size".into(),
            "16".into(),
            "--num-gpu-blocks-override".into(),
            n("num_gpu_blocks"),
            "--max-num-seqs".into(),
            n("max_num_seqs"),
            "--max-num-batched-tokens".into(),
            n("max_num_batched_tokens"),
            "--no-async-scheduling".into(),
            "--max-model-len".into(),
            "65536".into(),
            "--long-prefill-token-threshold".into(),
            "0".into(),
            "--json".into(),
        ];
        if config["free_order"].as_str() == Some("legacy") {
            args.extend(["--engine-version".into(), "vllm@0.18".into()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let v: Value = serde_json::from_str(&common::ok(&args)).unwrap();
        assert_eq!(v["completed"].as_u64(), Some(json_num(&config, "num_requests")), "{name}");
    }
}

/// vLLM 0.33's priority policy (`--scheduling-policy priority`): the schedules in
/// `tests/golden/vllm-priority/` (written by vLLM's own `Scheduler` with `policy="priority"`,
/// requests carrying priorities and arriving at later steps; that folder's README) are
/// reproduced step for step, and so is the FCFS twin that carries priorities and ignores them.
/// They are part of the repository, so this test never skips.
#[test]
fn every_priority_schedule_is_reproduced_step_for_step() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/vllm-priority");
    let files = schedule_files(&dir);
    assert!(files.len() >= 4, "expected the priority schedules and their FCFS twin, found {}", files.len());
    let policies: BTreeSet<String> =
        files.iter().map(|f| read_golden(f).config["policy"].as_str().unwrap().to_string()).collect();
    let report = replay_all(&dir, &files);
    assert_eq!(policies, BTreeSet::from(["fcfs".to_string(), "priority".to_string()]));
    assert!(report.is_empty(), "priority schedules not reproduced:\n{report}");
}

/// vLLM 0.33's LoRA batch rule (`--enable-lora --max-loras`): the schedules in
/// `tests/golden/vllm-lora/` (written by vLLM's own `Scheduler` with a `LoRAConfig` and requests
/// naming adapters; that folder's README) are reproduced step for step — the requests passed
/// by while `max_loras` adapters run, the base-model requests admitted behind them, and no
/// cached block shared across adapters. Part of the repository: never skips.
#[test]
fn every_lora_schedule_is_reproduced_step_for_step() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/vllm-lora");
    let files = schedule_files(&dir);
    assert!(files.len() >= 4, "expected the LoRA schedules, found {}", files.len());
    for f in &files {
        assert!(read_golden(f).config["max_loras"].as_u64().is_some(), "{}: a LoRA schedule", f.display());
    }
    let report = replay_all(&dir, &files);
    assert!(report.is_empty(), "LoRA schedules not reproduced:\n{report}");
}
